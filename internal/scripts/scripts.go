// Package scripts holds the Lua scripts behind every dsync state change.
// Each script is one atomic step; all keys a script touches share one hash
// tag, so a script never crosses a cluster slot.
package scripts

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/redis/rueidis"
)

// shas maps each script to its SHA-1, for callers that batch EVALSHA
// themselves (rueidis' ExecMulti sends SCRIPT LOAD before every batch).
var (
	shas    = map[*rueidis.Lua]string{}
	sources = map[*rueidis.Lua]string{}
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
// once, with the preludes those name before them, then the bodies.
func script(bodies ...string) *rueidis.Lua {
	var b strings.Builder
	seen := map[string]bool{}
	var prelude func(name string)
	prelude = func(name string) {
		for _, u := range uses(read(name)) {
			if !seen[u] {
				seen[u] = true
				prelude(u + ".lua")
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
	return newScript(b.String())
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
