package scripts_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/require"
)

// lib.lua's fmt prints every integer it is given as string.format('%.0f')
// does, on its fast paths (below 1e9, below 2e18 in two parts, around the
// 1e9 boundaries) and off them (negative, fractional, huge).
func TestFmt(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	lib, err := os.ReadFile("lib.lua")
	require.NoError(t, err)
	src := string(lib) + `
local out = {}
for i, v in ipairs(ARGV) do
  local n = tonumber(v)
  out[#out + 1] = fmt(n) .. '|' .. string.format('%.0f', n)
end
return out`
	args := []string{"0", "1", "7", "999999999", "1000000000", "1000000001", "1999999999", "2000000000",
		"1795775540434", "1795775540434469", "1795775540999999", "1795776000000000", "9007199254740991",
		"1999999999999999999", "2000000000000000000", "-1", "-1795775540434469", "1.5", "2.5", "1e300", "123456789012.75"}
	got, err := rc.Do(context.Background(), rc.B().Eval().Script(src).Numkeys(0).Arg(args...).Build()).AsStrSlice()
	require.NoError(t, err)
	require.Len(t, got, len(args))
	for i, g := range got {
		a, b, _ := strings.Cut(g, "|")
		require.Equal(t, b, a, "fmt(%s)", args[i])
	}
}
