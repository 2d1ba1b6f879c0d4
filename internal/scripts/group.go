package scripts

import _ "embed"

var (
	//go:embed group_lib.lua
	groupLibSrc string
	//go:embed group_begin.lua
	groupBeginSrc string
	//go:embed group_end.lua
	groupEndSrc string
	//go:embed group_leave.lua
	groupLeaveSrc string
	//go:embed group_forget.lua
	groupForgetSrc string
)

// The Group's scripts: each key is a run record like a Once's, with the
// waiters counted so that it goes away when the last one has the result.
// GroupUndo is the Once's undo after the Group's own cleanup; the renewal
// is OnceRenew.
var (
	GroupBegin  = newScript(groupLibSrc + groupBeginSrc)
	GroupEnd    = newScript(groupLibSrc + groupEndSrc)
	GroupUndo   = script("group_lib.lua", "group_leave.lua", "once_undo.lua")
	GroupLeave  = newScript(groupLibSrc + groupLeaveSrc + "return 0\n")
	GroupForget = newScript(groupForgetSrc)
)
