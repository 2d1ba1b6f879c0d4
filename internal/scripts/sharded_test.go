package scripts

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var redisCall = regexp.MustCompile(`redis\.call\(\s*['"]([A-Za-z]+)['"]\s*(?:,\s*['"]([A-Za-z]+)['"])?`)

// TestShardedVariants: every script that publishes or counts subscribers has
// a sharded variant, and the variant has no classic pub/sub call left, so
// in a cluster no wakeup goes to a channel nobody subscribed to.
func TestShardedVariants(t *testing.T) {
	variants := map[string]bool{}
	for _, s := range sharded {
		variants[sources[s]] = true
	}
	classic := 0
	for l, src := range sources {
		if variants[src] {
			continue
		}
		usesPubSub := false
		for _, m := range redisCall.FindAllStringSubmatch(src, -1) {
			cmd := strings.ToLower(m[1])
			if cmd == "publish" || cmd == "pubsub" {
				usesPubSub = true
			}
		}
		if !usesPubSub {
			_, ok := sharded[l]
			assert.False(t, ok, "a script without pub/sub calls has a sharded variant")
			continue
		}
		classic++
		s, ok := sharded[l]
		if !assert.True(t, ok, "script with pub/sub calls has no sharded variant:\n%s", firstLine(src)) {
			continue
		}
		for _, m := range redisCall.FindAllStringSubmatch(sources[s], -1) {
			cmd, sub := strings.ToLower(m[1]), strings.ToLower(m[2])
			assert.NotEqual(t, "publish", cmd, "sharded variant still calls %s %s:\n%s", cmd, sub, firstLine(src))
			if cmd == "pubsub" {
				assert.Equal(t, "shardnumsub", sub, "sharded variant still calls %s %s:\n%s", cmd, sub, firstLine(src))
			}
		}
	}
	require.GreaterOrEqual(t, classic, 10, "found publishing scripts; the pattern no longer matches them")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
