package scripts

import (
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// The builders of calls_prims.go make the keys and arguments dsync's call
// sites made inline before them, element for element.
func TestPrimCalls(t *testing.T) {
	fk := FairKeys("f")
	rk := RWKeys("rw")
	sk := SemKeys("s")
	ok := NewOnceKeys("o")
	gk := GroupKeys("g", "k")
	ek := ElectionKeys("el", "rec")
	ck := CondKeys("c")
	semFirst, semAgain := SemAcquireCalls(sk, "own", "w1", 2, 300, "10", false, "s:w:", "30")
	semTry, _ := SemAcquireCalls(sk, "own", "w1", 2, 300, "10", true, "s:w:", "30")
	for _, c := range []struct {
		name       string
		got        Call
		script     *rueidis.Lua
		keys, args []string
	}{
		{"FairAcquire", FairAcquireCall(fk, "m", "own", "10", "30", true, "f:w:", "wid", false), FairAcquire,
			[]string{"f", "f:queue", "f:places", "m"}, []string{"own", "10", "30", "1", "f:w:", "wid"}},
		{"FairAcquire check", FairAcquireCall(fk, "", "own", "10", "30", false, "f:w:", "wid", true), FairAcquire,
			[]string{"f", "f:queue", "f:places"}, []string{"own", "10", "30", "0", "f:w:", "wid", "check"}},
		{"FairRelease", FairReleaseCall(fk, "own", 7, "3600000", "f:w:"), FairRelease,
			fk, []string{"own", "7", "3600000", "f:w:"}},
		{"FairLeave", FairLeaveCall(fk, "own", "wid", "10", "f:w:", "3600000"), FairLeave,
			fk, []string{"own wid 10", "f:w:", "3600000"}},
		{"FairUndo", FairUndoCall(fk, "m", "own", "3600000", "f:w:"), FairUndo,
			[]string{"f", "f:queue", "f:places", "m"}, []string{"own", "0", "3600000", "f:w:"}},
		{"FairUndoFresh", FairUndoFreshCall(fk, "m", "own", "3600000", "f:w:"), FairUndoFresh,
			[]string{"f", "f:queue", "f:places", "m"}, []string{"own", "0", "3600000", "f:w:"}},
		{"RWAcquire", RWAcquireCall(rk, "m", "read", "own", "10", "30", false, "rw:w:", "wid", true), RWAcquire,
			[]string{"rw", "rw:readers", "rw:queue", "rw:places", "rw:rwait", "rw:radmit", "m"},
			[]string{"read", "own", "10", "30", "0", "rw:w:", "wid", "check"}},
		{"RWRelease", RWReleaseCall(rk, "write", "own", 9, "rw:w:"), RWRelease,
			rk, []string{"write", "own", "9", "", "rw:w:"}},
		{"RWLeave", RWLeaveCall(rk, "write", "own", "wid", "10", "rw:w:"), RWLeave,
			rk, []string{"write", "own wid 10", "rw:w:"}},
		{"RWUndo", RWUndoCall(rk, "m", "read", "own", "rw:w:"), RWUndo,
			append(rk[:6:6], "m"), []string{"read", "own", "0", "", "rw:w:"}},
		{"RWUndoFresh", RWUndoFreshCall(rk, "m", "read", "own", "rw:w:"), RWUndoFresh,
			append(rk[:6:6], "m"), []string{"read", "own", "0", "", "rw:w:"}},
		{"SemAcquire first", semFirst, SemAcquire,
			[]string{"s", "s:holders", "s:waiters", "s:want", "s:undone"},
			[]string{"own", "w1", "2", "300", "10", "wait", "s:w:", "30", "first"}},
		{"SemAcquire again", semAgain, SemAcquire, sk, []string{"own", "w1", "2", "300", "10", "wait", "s:w:", "30", "again"}},
		{"SemAcquire try", semTry, SemAcquire, sk, []string{"own", "w1", "2", "300", "10", "try", "s:w:", "30", "first"}},
		{"SemRelease", SemReleaseCall(sk, "own", 2, "s:w:", 300, 5, false), SemRelease,
			sk, []string{"own", "2", "s:w:", "300", "5"}},
		{"SemRelease exact", SemReleaseCall(sk, "own", 2, "s:w:", 300, 5, true), SemRelease,
			sk, []string{"own", "2", "s:w:", "300", "5", "exact"}},
		{"SemUndo", SemUndoCall(sk, "w1", "s:w:", "15000"), SemUndo, sk, []string{"w1", "s:w:", "15000"}},
		{"OnceBegin", OnceBeginCall(ok, "own", "10", "call"), OnceBegin,
			[]string{"o", "o:run", "o:run:undone"}, []string{"own", "10", "call"}},
		{"OnceEnd", OnceEndCall(ok, "own 3 call", "ok", "v"), OnceEnd,
			[]string{"o", "o:run", "o:ch"}, []string{"own 3 call", "ok", "v"}},
		{"OnceUndo", OnceUndoCall(ok, "call", "15000"), OnceUndo,
			[]string{"o", "o:run", "o:run:undone", "o:ch"}, []string{"call", "15000"}},
		{"GroupBegin", GroupBeginCall(gk, "own", "10", "call", "k", "0"), GroupBegin,
			[]string{"g:s:k", "g:r:k", "g:u:k", "g:c:k", "g:w:k", "g"}, []string{"own", "10", "call", "k", "0"}},
		{"GroupEnd", GroupEndCall(gk, "own 3 call", "err", "msg", "k", "0", "15000"), GroupEnd,
			gk, []string{"own 3 call", "err", "msg", "k", "0", "15000"}},
		{"GroupUndo", GroupUndoCall(gk, "call", "15000", "k"), GroupUndo, gk, []string{"call", "15000", "k"}},
		{"GroupLeave", GroupLeaveCall(gk, "call", "k"), GroupLeave, gk, []string{"call", "k"}},
		{"GroupForget", GroupForgetCall(gk, "k"), GroupForget, gk, []string{"k"}},
		{"WaitGroupAdd", WaitGroupAddCall("wg", "wg:ch", "wg:gen", -3), WaitGroupAdd,
			[]string{"wg", "wg:ch", "wg:gen"}, []string{"-3"}},
		{"ElectionBegin", ElectionBeginCall(ek, "own", 4, "v", "30000", "rec:ch"), ElectionBegin,
			[]string{"el", "rec"}, []string{"own", "4", "v", "30000", "rec:ch"}},
		{"ElectionProclaim", ElectionProclaimCall(ek, "own", 4, "v", "30000", "rec:ch"), ElectionProclaim,
			ek, []string{"own", "4", "v", "30000", "rec:ch"}},
		{"ElectionResign", ElectionResignCall(ek, "own", 4, "30000", "rec:ch"), ElectionResign,
			ek, []string{"own", "4", "30000", "rec:ch"}},
		{"ElectionRead", ElectionReadCall(ek, 0), ElectionRead, ek, []string{"0"}},
		{"CondWait", CondWaitCall(ck, "cl-1", "15000"), CondWait,
			[]string{"c", "c:places", "c:sig"}, []string{"cl-1", "15000"}},
		{"CondCheck", CondCheckCall(ck, "cl-1", "15000"), CondCheck, ck, []string{"cl-1", "15000"}},
		{"CondLeave", CondLeaveCall(ck, "cl-1", true), CondLeave, ck, []string{"cl-1", "1"}},
		{"CondSignal", CondSignalCall(ck, false), CondSignal, ck, []string{"one"}},
		{"CondBroadcast", CondSignalCall(ck, true), CondSignal, ck, []string{"all"}},
	} {
		require.Same(t, c.script, c.got.Script, c.name)
		require.Equal(t, c.keys, c.got.Keys, c.name)
		require.Equal(t, c.args, c.got.Args, c.name)
	}
	require.Equal(t, []string{"f", "f:queue", "f:places"}, fk, "a marker does not touch the shared keys")
	require.Equal(t, "own 5 w1 2", SemMember("own", 5, "w1", 2))
	require.Equal(t, []string{"x", "read", "own", "9"}, AppendRWRenewManyArgs([]string{"x"}, "read", "own", 9))
	require.Equal(t, []string{"x", "own 5 w1 2", "s:w:"}, AppendSemRenewManyArgs([]string{"x"}, "own 5 w1 2", "s:w:"))
	require.Equal(t, []string{"x", "own 3 call"}, AppendOnceRenewManyArgs([]string{"x"}, "own 3 call"))
	require.Equal(t, []string{"x", "own", "4", "30000"}, AppendElectionTouchManyArgs([]string{"x"}, "own", 4, "30000"))
	require.Equal(t, []string{"o", "o:run", "o:ch"}, []string{ok.State, ok.Run, ok.Channel})
}
