package scripts

import _ "embed"

// Semaphore, Once and WaitGroup scripts. The semaphore scripts share a
// prelude (pruning, waking), prepended here so each script stays one
// atomic step.
var (
	//go:embed sem_common.lua
	semCommonSrc string
	//go:embed sem_acquire.lua
	semAcquireSrc string
	//go:embed sem_release.lua
	semReleaseSrc string
	//go:embed sem_renew.lua
	semRenewSrc string
	//go:embed sem_undo.lua
	semUndoSrc string
	//go:embed once_begin.lua
	onceBeginSrc string
	//go:embed once_end.lua
	onceEndSrc string
	//go:embed once_renew.lua
	onceRenewSrc string
	//go:embed once_undo.lua
	onceUndoSrc string
	//go:embed wg_add.lua
	wgAddSrc string
)

var (
	SemAcquire   = newScript(semCommonSrc + semAcquireSrc)
	SemRelease   = newScript(semCommonSrc + semReleaseSrc)
	SemRenew     = newScript(semCommonSrc + semRenewSrc)
	SemUndo      = newScript(semCommonSrc + semUndoSrc)
	OnceBegin    = newScript(onceBeginSrc)
	OnceEnd      = newScript(onceEndSrc)
	OnceRenew    = newScript(onceRenewSrc)
	OnceUndo     = newScript(onceUndoSrc)
	WaitGroupAdd = newScript(wgAddSrc)
)
