package scripts

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every script composes: the preludes its files name exist, and no
// function is defined twice in one script (a prelude's function shadowed
// by a script's own of the same name is a bug waiting to happen: the
// semaphore's token function once called itself this way).
func TestScriptsCompose(t *testing.T) {
	def := regexp.MustCompile(`(?m)^local function (\w+)`)
	for _, src := range Used(false) {
		seen := map[string]bool{}
		for _, m := range def.FindAllStringSubmatch(src, -1) {
			require.False(t, seen[m[1]], "function %s defined twice in the script beginning %q", m[1], src[:min(len(src), 80)])
			seen[m[1]] = true
		}
	}
	entries, err := files.ReadDir(".")
	require.NoError(t, err)
	for _, e := range entries {
		for _, u := range uses(read(e.Name())) {
			_, err := files.ReadFile(u + ".lua")
			require.NoError(t, err, "%s uses %s", e.Name(), u)
		}
	}
}
