package scripts

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"sync"

	"github.com/redis/rueidis"
)

// The scripts of the uncontended Mutex cycle also run as Redis functions
// (FCALL), which cost the server less per call than EVALSHA (measured with
// callgrind: docs/design.md, Functions). They make one library per
// pub/sub mode (a Client uses one of them: sharded in a Redis 7 cluster,
// classic elsewhere), loaded on each primary on first use (see dsync's
// Client.runScript): its name and its functions' names carry a digest of
// its code, so a library of another version of dsync, loaded on the same
// server, never answers for this one, and both keep working side by side
// during a rolling upgrade.
//
// One mode per library, not both: every function a library defines is in
// the functions' Lua heap, which Redis's collector steps through every 50
// calls, so the other mode's release costs each call a share of that
// walk (bench -instr: about 200 instructions per call).
//
// Each function is the script's composed source as the body of a Lua
// function of KEYS and ARGV, the names the source uses: the same code
// runs either way, but for where lib.lua's functions are defined (once,
// at the library's top).
var functionScripts = []struct {
	name string
	l    *rueidis.Lua
}{
	{"mutex_acquire", MutexAcquire},
	{"mutex_release", MutexRelease},
}

type library struct {
	name, code string
	funcs      map[*rueidis.Lua]string
}

// libs are the classic library (libs[0]) and the sharded one (libs[1]).
var libs = [2]func() *library{
	sync.OnceValue(func() *library { return newLibrary(false) }),
	sync.OnceValue(func() *library { return newLibrary(true) }),
}

func lib(sharded bool) *library {
	if sharded {
		return libs[1]()
	}
	return libs[0]()
}

func newLibrary(sharded bool) *library {
	type fn struct {
		name string
		l    *rueidis.Lua
	}
	var fns []fn
	for _, s := range functionScripts {
		f := fn{s.name, s.l}
		if sharded {
			if v := Sharded(s.l); v != s.l {
				f = fn{s.name + "_sharded", v}
			}
		}
		fns = append(fns, f)
	}
	// lib.lua's functions come once, before the library's functions, which
	// share them as upvalues: made when the library loads, not on every
	// call that gets past a common case (and one copy in the heap the
	// collector walks). Their globals (redis, string) are looked up when
	// they run, after the load.
	var bodies strings.Builder
	for _, f := range fns {
		src, ok := bare[f.l]
		if !ok {
			panic("dsync scripts: a library function's script does not use lib.lua") // functionScripts lists one
		}
		bodies.WriteString("local function " + f.name + "(KEYS, ARGV)\n" + src + "\nend\n")
	}
	var body strings.Builder
	top := libFor(bodies.String())
	if sharded {
		top = shardedCalls.Replace(top)
	}
	body.WriteString(top)
	body.WriteString(bodies.String())
	sum := sha1.Sum([]byte(body.String()))
	name := "dsync_" + hex.EncodeToString(sum[:])[:16]
	lb := &library{name: name, funcs: map[*rueidis.Lua]string{}}
	var reg strings.Builder
	for _, f := range fns {
		lb.funcs[f.l] = name + "_" + f.name
		reg.WriteString("redis.register_function('" + name + "_" + f.name + "', " + f.name + ")\n")
	}
	lb.code = "#!lua name=" + name + "\n" + body.String() + reg.String()
	return lb
}

// Library returns the name and code (for FUNCTION LOAD) of the library of
// a Client that publishes with sharded pub/sub, or classic.
func Library(sharded bool) (name, code string) {
	l := lib(sharded)
	return l.name, l.code
}

// InLibrary reports whether src is the source of a script the library of
// that pub/sub mode runs as a function (its script need not be preloaded
// where the library is loaded).
func InLibrary(src string, sharded bool) bool {
	for l := range lib(sharded).funcs {
		if sources[l] == src {
			return true
		}
	}
	return false
}

// Function returns the name of the function that runs script l (a script
// of this package, or its sharded variant) in the library of that pub/sub
// mode, if it has one.
func Function(l *rueidis.Lua, sharded bool) (string, bool) {
	name, ok := lib(sharded).funcs[l]
	return name, ok
}
