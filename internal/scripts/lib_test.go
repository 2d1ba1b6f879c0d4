package scripts

import (
	"context"
	"testing"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/require"
)

// us_digits spells a TIME reply in µs exactly as fmt spells the number,
// the µs padded (TIME does not pad them), and server_us' two results agree.
func TestLibUsDigits(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	body := `
local out = {}
local cases = {{'1764240000', '0'}, {'1764240000', '7'}, {'1764240000', '12345'}, {'1764240000', '100000'}, {'1764240000', '999999'}, {'1', '5'}}
for _, c in ipairs(cases) do
  local d = us_digits(c[1], c[2])
  table.insert(out, d)
  table.insert(out, fmt(tonumber(c[1]) * 1000000 + tonumber(c[2])))
end
local us, d = server_us()
table.insert(out, d)
table.insert(out, fmt(us))
for _, n in ipairs({0, -1, 1795784950420, 2^53, -2^53, 4611686018427387904, '42', 2.5}) do
  table.insert(out, fmt(n))
end
return out`
	got, err := rc.Do(ctx, rc.B().Eval().Script(read("lib.lua")+body).Numkeys(0).Build()).AsStrSlice()
	require.NoError(t, err)
	want := []string{"1764240000000000", "1764240000000007", "1764240000012345", "1764240000100000", "1764240000999999", "1000005"}
	for i, w := range want {
		require.Equal(t, w, got[2*i], "us_digits, case %d", i)
		require.Equal(t, w, got[2*i+1], "fmt, case %d", i)
	}
	fmts := got[len(got)-8:]
	got = got[:len(got)-8]
	require.Equal(t, got[len(got)-1], got[len(got)-2], "server_us: digits and number")
	require.Equal(t, []string{"0", "-1", "1795784950420", "9007199254740992", "-9007199254740992", "4611686018427387904", "42", "2"}, fmts, "fmt")
}
