package dsync

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// The scripts of the uncontended Mutex cycle run as Redis functions
// (FCALL) where the server allows them: per call the server does less
// than for EVALSHA (bench -instr: docs/design.md has the counts). Elsewhere (a
// user whose ACL refuses FUNCTION or FCALL, a managed service that
// disables them, a stand-in server without them) they run as scripts, as
// every other script does.
//
// The library (scripts.Library) is loaded on every node when the Client
// starts (preload) and again on the node that answers "Function not
// found": after FUNCTION FLUSH, a restart without persistence, or a
// failover to a node that never had it. Its name carries a digest of its
// code, so a Client of another dsync version on the same server uses its
// own library beside this one (a rolling upgrade), and nothing ever
// replaces a library another Client uses.

// funcState is a Client's use of the function library.
type funcState struct {
	// off: the server refused FUNCTION LOAD or FCALL (an ACL, a managed
	// service, a server without functions): scripts for the Client's life.
	off atomic.Bool
	// pause, when not 0, is until when (unix ns) scripts run instead: a
	// load that no node took (nodes unreachable, all of them replicas) is
	// tried again only then, not by every call meanwhile.
	pause atomic.Int64
	// mu serializes loads, so that a burst of calls that found the library
	// missing loads it once.
	mu sync.Mutex
	// loads counts the loads that succeeded (or found it there): a load
	// waits for one in progress, and then sees that it need not load.
	loads atomic.Int64
}

// runScript runs script l (the deployment's variant: Client.lua) with keys
// and args: as its function where it has one and the server allows them,
// else as EVALSHA (with EVAL after NOSCRIPT). A call that the server did
// not run (no such function, FCALL refused) goes again as a script; no
// call runs twice.
func (c *Client) runScript(ctx context.Context, l *rueidis.Lua, keys, args []string) rueidis.RedisResult {
	l = c.lua(l)
	name, ok := scripts.Function(l, c.sharded)
	if !ok || c.fn.off.Load() || c.fn.paused() {
		return l.Exec(ctx, c.rc, keys, args)
	}
	fcall := func() rueidis.RedisResult {
		return c.rc.Do(ctx, c.rc.B().Fcall().Function(name).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	}
	// The loads before the call: one that ends after it (the preload's)
	// is not repeated.
	n := c.fn.loads.Load()
	r := fcall()
	switch funcErr(r.Error()) {
	case funcMissing:
		// Loaded again, then called again: the first call did not run.
		if !c.loadFunctions(ctx, n) {
			return l.Exec(ctx, c.rc, keys, args)
		}
		if r = fcall(); funcErr(r.Error()) == funcOK {
			return r
		}
		return l.Exec(ctx, c.rc, keys, args)
	case funcRefused:
		c.refuseFunctions(r.Error())
		return l.Exec(ctx, c.rc, keys, args)
	}
	return r
}

// loadRetry is how long a Client whose load of the library no node took
// runs the scripts instead before it tries again.
const loadRetry = 10 * time.Second

// paused reports whether a failed load has the Client run scripts for now.
func (f *funcState) paused() bool {
	p := f.pause.Load()
	return p != 0 && time.Now().UnixNano() < p
}

// funcErr classifies an FCALL's or a FUNCTION LOAD's error.
type funcErrKind int

const (
	funcOK      funcErrKind = iota // no error, or one the call itself returned
	funcMissing                    // the server has no such function: not run
	funcRefused                    // the server refuses the command: not run
)

func funcErr(err error) funcErrKind {
	e, ok := rueidis.IsRedisErr(err)
	if !ok {
		return funcOK
	}
	msg := e.Error()
	switch {
	case strings.Contains(msg, "Function not found"):
		return funcMissing
	case strings.HasPrefix(msg, "NOPERM"), strings.Contains(msg, "unknown command"), strings.Contains(msg, "unknown subcommand"):
		return funcRefused
	}
	return funcOK
}

// refuseFunctions turns functions off for the Client's life.
func (c *Client) refuseFunctions(err error) {
	if !c.fn.off.Swap(true) {
		c.cfg.logger.Debug("dsync: Redis refuses functions; the Mutex's scripts run with EVALSHA", "err", err)
	}
}

// loadFunctions loads the function library on every node, unless a load
// that succeeded after seen (the loads count the caller saw before its
// call failed) has done it meanwhile. It reports whether the library may
// now be there: false when every node refused or failed.
func (c *Client) loadFunctions(ctx context.Context, seen int64) bool {
	nodes := c.rc.Nodes()
	via := make([]nodeConn, 0, len(nodes))
	for _, n := range nodes {
		via = append(via, n)
	}
	return c.loadFunctionsOn(ctx, seen, via)
}

// nodeConn is what a load sends its command on: a node's client, or a
// connection of the preload's own to that node.
type nodeConn interface {
	B() rueidis.Builder
	Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult
}

// loadFunctionsOn is loadFunctions with a connection to each node.
func (c *Client) loadFunctionsOn(ctx context.Context, seen int64, nodes []nodeConn) bool {
	c.fn.mu.Lock()
	defer c.fn.mu.Unlock()
	if c.fn.loads.Load() != seen {
		return !c.fn.off.Load()
	}
	name, code := scripts.Library(c.sharded)
	loaded := false
	for _, n := range nodes {
		// Pinned: see preload.
		err := n.Do(ctx, n.B().FunctionLoad().FunctionCode(code).Build().Pin()).Error()
		switch {
		case err == nil, err != nil && strings.Contains(err.Error(), "already exists"):
			loaded = true
		case funcErr(err) == funcRefused:
			c.refuseFunctions(err)
			return false
		default:
			// A replica (READONLY), a node gone: the others may do.
			c.cfg.logger.Debug("dsync: loading the function library failed on a node", "library", name, "err", err)
		}
	}
	if loaded {
		c.fn.pause.Store(0)
		c.fn.loads.Add(1)
	} else {
		c.fn.pause.Store(time.Now().Add(loadRetry).UnixNano())
	}
	return loaded
}
