package dsync

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// hashTag is Redis Cluster's rule: the text between the first '{' and the
// first '}' after it, if non-empty; else the whole key.
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

func FuzzKeys(f *testing.F) {
	for _, s := range []string{"a", "{", "}", "%", "%7D", "%25", "a}b{c", "\x00\xff", "x:{y}:z"} {
		f.Add(s, "t")
	}
	f.Fuzz(func(t *testing.T, name, other string) {
		c := &Client{cfg: defaultConfig()}
		if checkName(name) != nil {
			return
		}
		key := c.lockKey("mutex", name)
		got, rest, ok := splitKey(c.cfg.prefix, key+":ch")
		require.True(t, ok, "splitKey(%q)", key)
		require.Equal(t, name, got, "splitKey(%q)", key)
		require.Equal(t, "mutex:ch", rest, "splitKey(%q)", key)
		// Every key of the lock shares the escaped name as hash tag.
		require.Equal(t, escapeName(name), hashTag(key+":queue"), "hash tag of %q", key)
		// The Mutex's keys, made in one allocation, are the same strings.
		k, ch, wk := c.lockKeyAnd("mutex", name, ":ch", ":waiting")
		require.Equal(t, []string{key, key + ":ch", key + ":waiting"}, []string{k, ch, wk}, "lockKeyAnd(%q)", name)
		if other != name && checkName(other) == nil {
			require.NotEqual(t, key, c.lockKey("mutex", other), "names %q and %q share a key", name, other)
		}
	})
}

func FuzzOptions(f *testing.F) {
	f.Add("dsync", int64(30e9), int64(0), 8)
	f.Fuzz(func(t *testing.T, prefix string, lease, leaseTime int64, handoffs int) {
		cfg := defaultConfig()
		for _, o := range []Option{WithKeyPrefix(prefix), WithLease(0), WithMaxLocalHandoffs(handoffs)} {
			o(&cfg)
		}
		WithLease(durationOf(lease))(&cfg)
		if err := cfg.validate(); err == nil {
			require.GreaterOrEqual(t, cfg.lease, minLease, "invalid config accepted: %+v", cfg)
			require.False(t, strings.ContainsAny(cfg.prefix, "{}"), "invalid config accepted: %+v", cfg)
			require.NotEqual(t, "", cfg.prefix, "invalid config accepted: %+v", cfg)
			require.GreaterOrEqual(t, cfg.handoffs, 0, "invalid config accepted: %+v", cfg)
		}
		lc := newLockConfig([]LockOption{WithLeaseTime(durationOf(leaseTime))})
		require.GreaterOrEqual(t, lc.leaseTime, time.Duration(0), "negative lease time")
	})
}

func durationOf(n int64) time.Duration { return time.Duration(n) }
