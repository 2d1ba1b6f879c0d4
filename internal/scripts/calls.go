package scripts

import "github.com/redis/rueidis"

// Call is one call of a script: the script, and its keys and arguments.
// Each script's inputs are built in one place, by a function named after
// the script (MutexUnwait: MutexUnwaitCall), whose parameters name them in
// the order its source describes; callers pass values, never positions.
// Calls on a hot path, which reuse their caller's buffers, have builders
// that append instead (AppendMutexReleaseArgs), and a key list that a
// primitive's scripts share is built once per lock (RWKeys). A Call's
// LuaExec goes into batches of one script (ExecMulti) as it is.
// TestEveryScriptBuilt checks that every script dsync calls has one.
type Call struct {
	Script *rueidis.Lua
	rueidis.LuaExec
}

// MutexUnwaitCall ends a wait of client (its wait: the last 8 characters
// of the wait's attempt marker) for the Mutex lock key without the lock
// (mutex_unwait.lua). grantee is the wait's owner when it was made for the
// wait alone ("" otherwise): a grant to it is released. lease, with a
// grantee, is the lease in ms the wait queued for a grant with ("": the
// queue entry is left alone).
func MutexUnwaitCall(key, client, wait, grantee, lease string) Call {
	args := []string{client, wait}
	if grantee != "" {
		args = append(args, grantee)
		if lease != "" {
			args = append(args, lease)
		}
	}
	return Call{MutexUnwait, rueidis.LuaExec{Keys: []string{key, key + ":waiting"}, Args: args}}
}
