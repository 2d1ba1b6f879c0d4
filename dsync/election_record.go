package dsync

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dsync/dsync/internal/scripts"
)

// A change is one entry of the leader record: Term 0 says "no leader".
type change struct {
	ver uint64
	l   Leader
}

// electionState is what ElectionRead returns: the lock's holder and lease,
// and the record's changes from the version asked about on (if contiguous;
// else the current one alone). The last change is the current one.
type electionState struct {
	owner      string // "" when the lock is free
	token      uint64
	pttl       time.Duration
	contiguous bool
	changes    []change
}

// current is the leader now: the record's last change, if the lock is still
// held in its term; an unresigned leader that lost its lock is none.
func (st *electionState) current() Leader {
	if len(st.changes) == 0 {
		return Leader{}
	}
	l := st.changes[len(st.changes)-1].l
	if l.Term == 0 || l.Term != st.token || l.Owner != st.owner {
		return Leader{}
	}
	return l
}

func (e *Election) read(ctx context.Context, seen uint64) (electionState, error) {
	c := e.c
	v, err := c.run(ctx, scripts.ElectionReadCall(e.keys, seen)).AsStrSlice()
	if err != nil {
		return electionState{}, wrapErr(KindElection, e.name, err)
	}
	st, err := parseElection(v)
	return st, wrapErr(KindElection, e.name, err)
}

func parseElection(v []string) (st electionState, err error) {
	if len(v) < 3 {
		return st, fmt.Errorf("unexpected election reply of %d values", len(v))
	}
	if f := strings.Fields(v[0]); len(f) >= 2 && f[0] != "-" {
		st.owner = f[0]
		if st.token, err = strconv.ParseUint(f[1], 10, 64); err != nil {
			return st, fmt.Errorf("unexpected lock value %q", v[0])
		}
	}
	ms, err := strconv.ParseInt(v[1], 10, 64)
	if err != nil {
		return st, fmt.Errorf("unexpected lock pttl %q", v[1])
	}
	st.pttl = time.Duration(ms) * time.Millisecond
	st.contiguous = v[2] == "1"
	for _, s := range v[3:] {
		ch, err := parseChange(s)
		if err != nil {
			return st, err
		}
		st.changes = append(st.changes, ch)
	}
	return st, nil
}

// parseChange decodes "<version> <term> <since ms> <#owner> <owner><value>"
// (see election_lib.lua).
func parseChange(s string) (change, error) {
	bad := fmt.Errorf("unexpected election record %.80q", s)
	var n [4]uint64
	rest := s
	for i := range n {
		f, r, ok := strings.Cut(rest, " ")
		x, err := strconv.ParseUint(f, 10, 64)
		if !ok || err != nil {
			return change{}, bad
		}
		n[i], rest = x, r
	}
	if n[3] > uint64(len(rest)) {
		return change{}, bad
	}
	ch := change{ver: n[0]}
	if n[1] != 0 {
		ch.l = Leader{Value: rest[n[3]:], Owner: rest[:n[3]], Term: n[1], Since: time.UnixMilli(int64(n[2]))}
	}
	return ch, nil
}
