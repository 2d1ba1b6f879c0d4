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
// callgrind: docs/performance.md). They make one library, loaded on each
// primary on first use (see dsync's Client.runScript): its name and its
// functions' names carry a digest of its code, so a library of another
// version of dsync, loaded on the same server, never answers for this one,
// and both keep working side by side during a rolling upgrade.
//
// Each function is the script's composed source as the body of a Lua
// function of KEYS and ARGV, the names the source uses: the same code
// runs either way.
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

var lib = sync.OnceValue(func() *library {
	type fn struct {
		name string
		l    *rueidis.Lua
	}
	var fns []fn
	for _, s := range functionScripts {
		fns = append(fns, fn{s.name, s.l})
		if v := Sharded(s.l); v != s.l {
			fns = append(fns, fn{s.name + "_sharded", v})
		}
	}
	var body strings.Builder
	for _, f := range fns {
		body.WriteString("local function " + f.name + "(KEYS, ARGV)\n" + sources[f.l] + "\nend\n")
	}
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
})

// Library returns the function library's name and code (for FUNCTION
// LOAD).
func Library() (name, code string) {
	l := lib()
	return l.name, l.code
}

// InLibrary reports whether src is the source of a script the library
// runs as a function (its script need not be preloaded where the library
// is loaded).
func InLibrary(src string) bool {
	for l := range lib().funcs {
		if sources[l] == src {
			return true
		}
	}
	return false
}

// Function returns the name of the function that runs script l (a script
// of this package, or its sharded variant), if the library has one.
func Function(l *rueidis.Lua) (string, bool) {
	name, ok := lib().funcs[l]
	return name, ok
}
