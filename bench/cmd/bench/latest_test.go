package main

import (
	"os"
	"testing"
)

// results/latest.md is what the bench's markdown makes of
// results/latest.json: the two files of one run agree, so that the
// documents generated from them (-docs) quote one run.
func TestLatestMarkdownFromJSON(t *testing.T) {
	r, err := readReport("../../results")
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile("../../results/latest.md")
	if err != nil {
		t.Fatal(err)
	}
	if r.markdown() != string(md) {
		t.Errorf("results/latest.md differs from the markdown of results/latest.json: run go run ./cmd/bench -docs (from bench/)")
	}
}
