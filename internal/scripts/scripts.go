// Package scripts holds the Lua scripts behind every dsync state change.
// Each script is one atomic step; all keys a script touches share one hash
// tag, so a script never crosses a cluster slot.
package scripts

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/redis/rueidis"
)

// shas maps each script to its SHA-1, for callers that batch EVALSHA
// themselves (rueidis' ExecMulti sends SCRIPT LOAD before every batch).
var (
	shas    = map[*rueidis.Lua]string{}
	sources = map[*rueidis.Lua]string{}
	// bare holds, for each script that uses lib.lua (and its sharded
	// variant), its source without lib.lua's functions: a function
	// library defines those once for all its functions (functions.go).
	bare = map[*rueidis.Lua]string{}
)

// sharded maps each script that publishes to its variant for Redis Cluster,
// which publishes with SPUBLISH and counts subscribers with PUBSUB
// SHARDNUMSUB, so wakeups stay on the node that owns the lock's slot.
var sharded = map[*rueidis.Lua]*rueidis.Lua{}

// The classic pub/sub calls of the scripts and their sharded forms. Scripts
// spell them exactly so; a test checks that no other spelling is used.
var shardedCalls = strings.NewReplacer(
	"redis.call('publish',", "redis.call('spublish',",
	"redis.call('pubsub', 'numsub',", "redis.call('pubsub', 'shardnumsub',",
)

// newScript wraps src for EVALSHA with an EVAL fallback and records its
// SHA-1, computed here from the source as rueidis computes it; a script that
// publishes gets a sharded variant as well.
func newScript(src string) *rueidis.Lua {
	l := register(src)
	if s := shardedCalls.Replace(src); s != src {
		sharded[l] = register(s)
	}
	primaries = append(primaries, l)
	return l
}

// primaries are the scripts newScript made, without their sharded variants.
var primaries []*rueidis.Lua

func register(src string) *rueidis.Lua {
	l := rueidis.NewLuaScript(src)
	sum := sha1.Sum([]byte(src))
	shas[l] = hex.EncodeToString(sum[:])
	sources[l] = src
	return l
}

// Sharded returns the variant of l for sharded pub/sub (Redis Cluster), or l
// itself if l does not publish.
func Sharded(l *rueidis.Lua) *rueidis.Lua {
	if s, ok := sharded[l]; ok {
		return s
	}
	return l
}

// Source returns the source of a script made by this package.
func Source(l *rueidis.Lua) string { return sources[l] }

// Used returns the source of every script a Client runs: with sharded
// pub/sub the sharded variants, otherwise the classic ones.
func Used(shardedPubSub bool) []string {
	srcs := make([]string, 0, len(primaries))
	for _, l := range primaries {
		if shardedPubSub {
			l = Sharded(l)
		}
		srcs = append(srcs, sources[l])
	}
	return srcs
}

// SHA1 returns the SHA-1 of a script made by this package.
func SHA1(l *rueidis.Lua) (string, bool) {
	s, ok := shas[l]
	return s, ok
}

//go:embed *.lua
var files embed.FS

// script composes bodies (file names, in order) into one script: first the
// preludes they name on their first line ("-- uses: lib fair_lib"), each
// once, with the preludes those name before them, then the bodies. Of
// lib.lua, only the functions the rest of the script calls are kept (see
// libFor): a local function costs its closure on every call that gets to
// its definition. They come first, or in place of a body's line "-- (lib.lua
// here)".
func script(bodies ...string) *rueidis.Lua {
	var b strings.Builder
	seen := map[string]bool{}
	lib := false
	var prelude func(name string)
	prelude = func(name string) {
		for _, u := range uses(read(name)) {
			if !seen[u] {
				seen[u] = true
				prelude(u + ".lua")
				if u == "lib" {
					lib = true
					continue
				}
				b.WriteString(read(u + ".lua"))
			}
		}
	}
	for _, f := range bodies {
		prelude(f)
	}
	for _, f := range bodies {
		b.WriteString(read(f))
	}
	rest := b.String()
	if !lib {
		return newScript(rest)
	}
	// At the top, or where a body says (after a common case that needs
	// none of it).
	src := libFor(rest) + rest
	if before, after, ok := strings.Cut(rest, libHere); ok {
		src = before + libHere + libFor(rest) + after
	}
	l := newScript(src)
	bare[l] = rest
	if s, ok := sharded[l]; ok {
		bare[s] = shardedCalls.Replace(rest)
	}
	return l
}

// libHere is the line by which a body places lib.lua's functions.
const libHere = "\n-- (lib.lua here)\n"

// libFunc matches the start of a function definition in lib.lua.
var libFunc = regexp.MustCompile(`(?m)^local function (\w+)\(`)

// libFor returns lib.lua with only the functions that src calls, directly
// or through each other, in lib.lua's order (a function is defined before
// those that call it). A function's part of lib.lua is its definition and
// the comment lines right above it; the file's head comes first.
func libFor(src string) string {
	l := libParts()
	need := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for _, p := range l.parts {
			if need[p.name] {
				continue
			}
			used := calls(src, p.name)
			for _, q := range l.parts {
				if need[q.name] && q.name != p.name && l.calls[q.name][p.name] {
					used = true
				}
			}
			if used {
				need[p.name], changed = true, true
			}
		}
	}
	var b strings.Builder
	b.WriteString(l.head)
	for _, p := range l.parts {
		if need[p.name] {
			b.WriteString(p.text)
		}
	}
	return b.String()
}

// A libPart is one function of lib.lua: its name and its text (definition
// and the comment lines above it).
type libPart struct{ name, text string }

// calls reports whether text calls the function name: "name(" not preceded
// by a word character, '.' or ':' (a method, or another name ending so).
func calls(text, name string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], name+"(")
		if j < 0 {
			return false
		}
		j += i
		if j == 0 {
			return true
		}
		switch c := text[j-1]; {
		case c == '_' || c == '.' || c == ':' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		default:
			return true
		}
		i = j + 1
	}
}

// libSplit is lib.lua cut into its head and functions, with which
// function calls which: read once, for every script that uses lib.lua
// (composing each script from the file again, with a pattern compiled
// for every function and script, cost 84 ms and 11 MB at program start).
type libSplit struct {
	head  string
	parts []libPart
	calls map[string]map[string]bool // calls[f][g]: f's definition calls g
}

var libParts = sync.OnceValue(func() *libSplit {
	lib := read("lib.lua")
	defs := libFunc.FindAllStringSubmatchIndex(lib, -1)
	l := &libSplit{head: lib, calls: map[string]map[string]bool{}}
	for i, d := range defs {
		from := commentStart(lib, d[0])
		if i == 0 {
			l.head = lib[:from]
		}
		to := len(lib)
		if i+1 < len(defs) {
			to = commentStart(lib, defs[i+1][0])
		}
		name := lib[d[2]:d[3]]
		l.parts = append(l.parts, libPart{name, lib[from:to]})
	}
	for _, q := range l.parts {
		def := q.text[strings.Index(q.text, "local function"):]
		l.calls[q.name] = map[string]bool{}
		for _, p := range l.parts {
			l.calls[q.name][p.name] = calls(def, p.name)
		}
	}
	return l
})

// commentStart returns where the comment lines right above offset i of s
// (the start of a line) begin, or i if there are none.
func commentStart(s string, i int) int {
	for i > 0 {
		j := strings.LastIndexByte(s[:i-1], '\n') + 1
		if !strings.HasPrefix(s[j:i], "--") {
			break
		}
		i = j
	}
	return i
}

// uses returns the preludes src names on its first line.
func uses(src string) []string {
	line, _, _ := strings.Cut(src, "\n")
	names, ok := strings.CutPrefix(line, "-- uses:")
	if !ok {
		return nil
	}
	return strings.Fields(names)
}

func read(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(fmt.Sprintf("dsync scripts: %v", err)) // a file named in this package is missing
	}
	return string(b)
}
