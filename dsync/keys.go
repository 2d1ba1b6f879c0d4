package dsync

import (
	"fmt"
	"strings"
)

// Key layout: "<prefix>:{<name>}:<kind>[:<part>]". The name is the hash tag,
// so every key and channel of one lock lands in one cluster slot. A hash tag
// ends at the first '}', so the name is escaped: '%' as "%25" and '}' as
// "%7D". The escape is injective, and ordinary names stay readable.

func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty name: give it a name of 1 to %d bytes", ErrInvalidArgument, MaxNameLen)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: name of %d bytes exceeds MaxNameLen (%d): shorten it (a hash of a long name will do)", ErrInvalidArgument, len(name), MaxNameLen)
	}
	return nil
}

func escapeName(name string) string {
	if !strings.ContainsAny(name, "%}") {
		return name
	}
	var b strings.Builder
	b.Grow(len(name) + 8)
	for i := 0; i < len(name); i++ {
		switch name[i] {
		case '%':
			b.WriteString("%25")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(name[i])
		}
	}
	return b.String()
}

// unescapeName reverses escapeName; ok is false for text escapeName cannot
// have produced.
func unescapeName(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, !strings.Contains(s, "}")
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '}':
			return "", false
		case s[i] != '%':
			b.WriteByte(s[i])
		case strings.HasPrefix(s[i:], "%25"):
			b.WriteByte('%')
			i += 2
		case strings.HasPrefix(s[i:], "%7D"):
			b.WriteByte('}')
			i += 2
		default:
			return "", false
		}
	}
	return b.String(), true
}

// lockKey is the base key of one lock; its other keys and its channel add
// a suffix to it.
func (c *Client) lockKey(kind, name string) string {
	return c.cfg.prefix + ":{" + escapeName(name) + "}:" + kind
}

// lockKeyAnd returns lockKey(kind, name), and that key followed by s1 and
// by s2, the three in one allocation (a Mutex is made per call by some
// programs: its keys are on their hot path).
func (c *Client) lockKeyAnd(kind, name, s1, s2 string) (key, k1, k2 string) {
	esc := escapeName(name)
	n := len(c.cfg.prefix) + len(":{") + len(esc) + len("}:") + len(kind)
	var b strings.Builder
	b.Grow(2*n + len(s1) + len(s2))
	for _, s := range [...]string{c.cfg.prefix, ":{", esc, "}:", kind, s1, c.cfg.prefix, ":{", esc, "}:", kind, s2} {
		b.WriteString(s)
	}
	all := b.String()
	return all[:n], all[:n+len(s1)], all[n+len(s1):]
}

// splitKey parses a key written by lockKey (with any suffix) back into its
// name and the rest ("mutex", "fair:queue", ...).
func splitKey(prefix, key string) (name, rest string, ok bool) {
	s, found := strings.CutPrefix(key, prefix+":{")
	if !found {
		return "", "", false
	}
	i := strings.IndexByte(s, '}')
	if i < 0 || i+1 >= len(s) || s[i+1] != ':' {
		return "", "", false
	}
	name, ok = unescapeName(s[:i])
	return name, s[i+2:], ok
}
