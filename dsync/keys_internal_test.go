package dsync

import (
	"strings"
	"testing"
	"time"
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
		if !ok || got != name || rest != "mutex:ch" {
			t.Fatalf("splitKey(%q) = %q, %q, %v", key, got, rest, ok)
		}
		// Every key of the lock shares the escaped name as hash tag.
		if tag := hashTag(key + ":queue"); tag != escapeName(name) {
			t.Fatalf("hash tag of %q = %q", key, tag)
		}
		if other != name && checkName(other) == nil && c.lockKey("mutex", other) == key {
			t.Fatalf("names %q and %q share a key", name, other)
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
			if cfg.lease < minLease || strings.ContainsAny(cfg.prefix, "{}") || cfg.prefix == "" || cfg.handoffs < 0 {
				t.Fatalf("invalid config accepted: %+v", cfg)
			}
		}
		lc := newLockConfig([]LockOption{WithLeaseTime(durationOf(leaseTime))})
		if lc.leaseTime < 0 {
			t.Fatalf("negative lease time %v", lc.leaseTime)
		}
	})
}

func durationOf(n int64) time.Duration { return time.Duration(n) }
