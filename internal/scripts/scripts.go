// Package scripts holds the Lua scripts behind every dsync state change.
// Each script is one atomic step; all keys a script touches share one hash
// tag, so a script never crosses a cluster slot.
package scripts

import (
	_ "embed"

	"github.com/redis/rueidis"
)

var (
	//go:embed mutex_acquire.lua
	mutexAcquireSrc string
	//go:embed mutex_release.lua
	mutexReleaseSrc string
	//go:embed mutex_handoff.lua
	mutexHandoffSrc string
	//go:embed mutex_renew.lua
	mutexRenewSrc string
)

// Scripts run through EVALSHA with an EVAL fallback; the SHA-1 is computed by
// rueidis from the source, never copied by hand.
var (
	MutexAcquire = rueidis.NewLuaScript(mutexAcquireSrc)
	MutexRelease = rueidis.NewLuaScript(mutexReleaseSrc)
	MutexHandoff = rueidis.NewLuaScript(mutexHandoffSrc)
	MutexRenew   = rueidis.NewLuaScript(mutexRenewSrc)
)
