package dsync

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// maxInspectWaiters bounds the queue Inspect reads for one lock.
const maxInspectWaiters = 1000

// LockState is a snapshot of one lock in Redis, as Inspect reports it: read
// atomically, out of date as soon as it returns. Use it to look, never to
// decide who holds a lock.
type LockState struct {
	Kind Kind
	Name string
	// Holders is empty when the lock is free; for a Once, the caller
	// running f.
	Holders []Holder
	// LastToken is the latest fencing token issued or reserved for the
	// lock (a Mutex's may be above its holder's); 0 when unknown.
	LastToken uint64
	// Waiters are the live waiters queued in Redis, first in line first,
	// at most 1000; for a Mutex, the Clients whose goroutines wait, the
	// holder's own included, in no order, each with its goroutines
	// (Waiter.Count), as the Client last wrote them (10 ms after its
	// queue changed, at least every lease/3).
	Waiters []Waiter
	// Mode is "read" or "write" for a held RWMutex, "" otherwise.
	Mode string
	// Size and Free are the permits of a Semaphore.
	Size, Free int64
	// Done reports that a Once's function has succeeded.
	Done bool
	// Counter is a WaitGroup's counter.
	Counter int64
	// Key is, for a Group, the key of this state (one per key with a
	// record; Done when the result is there).
	Key string
	// Leader is an Election's leader (Leader{} when it has none); its
	// Waiters are the candidates.
	Leader Leader
}

// Holder is one owner holding a lock.
type Holder struct {
	Owner string
	// Count is the number of acquisitions not yet released, as Redis
	// counts them (not re-entries through the holding Client); 0 for a
	// Semaphore.
	Count int64
	// Token is the fencing token Redis records (for a Mutex, the last its
	// Client reserved, at least the holder's); 0 for a Semaphore. Owner is
	// the owner that acquired in Redis.
	Token uint64
	// Lease is how long the hold has left unless renewed; -1: no expiry.
	Lease time.Duration
	// Permits is the number of Semaphore permits held; 1 for other kinds.
	Permits int64
}

// Waiter is one owner queued for a lock, or, for a Mutex, one Client whose
// goroutines wait for it.
type Waiter struct {
	// Owner is the waiting owner; for a Mutex, the waiting Client.
	Owner string
	// Place is how long its place has left unless renewed.
	Place time.Duration
	// Permits is what a Semaphore waiter asks for; 1 otherwise.
	Permits int64
	// Count is, for a Mutex, the Client's waiting goroutines; 1 otherwise.
	Count int64
}

// LockRef names a lock found in Redis.
type LockRef struct {
	Kind Kind
	Name string
}

// inspectable are the kinds whose lock is the value "<owner> <token>
// <count>", read by the InspectLock script and reset by ForceUnlock.
var inspectable = []struct {
	kind  Kind
	part  string // the kind's part of the key
	queue bool   // a FairMutex queue ("<key>:queue", "<key>:places")
}{
	{KindMutex, "mutex", false},
	{KindFairMutex, "fair", true},
}

// otherLayouts are the primitives with several keys, read by the
// InspectOther script: the kind's part of the key and the key suffixes.
var otherLayouts = []struct {
	kind   Kind
	part   string
	layout string
	keys   []string
}{
	{KindRWMutex, "rw", "rw", []string{"", ":readers", ":queue", ":places"}},
	{KindSemaphore, "sem", "sem", []string{"", ":holders", ":waiters", ":want"}},
	{KindOnce, "once", "once", []string{"", ":run"}},
	{KindOnce, "oncevalue", "once", []string{"", ":run"}}, // OnceValue's Once
	{KindWaitGroup, "wg", "wg", []string{""}},
	{KindCond, "cond", "cond", []string{"", ":places", ":sig"}},
}

// Inspect returns the state of every primitive called name under the
// Client's prefix, one LockState per kind found. A name never used, or whose
// keys have expired, returns no states and no error.
func (c *Client) Inspect(ctx context.Context, name string) ([]LockState, error) {
	if err := c.checkCall(ctx, checkName(name)); err != nil {
		return nil, err
	}
	execs := make([]rueidis.LuaExec, len(inspectable))
	for i, l := range inspectable {
		execs[i] = scripts.InspectLockCall(c.lockKey(l.part, name), l.queue, maxInspectWaiters).LuaExec
	}
	out, err := inspected(nil, name, scripts.InspectLock.ExecMulti(ctx, c.rc, execs...), parseLockState,
		func(i int) Kind { return inspectable[i].kind }, nil)
	if err != nil {
		return nil, err
	}
	others := make([]rueidis.LuaExec, len(otherLayouts))
	for i, l := range otherLayouts {
		base := c.lockKey(l.part, name)
		keys := make([]string, len(l.keys))
		for j, suffix := range l.keys {
			keys[j] = base + suffix
		}
		others[i] = scripts.InspectOtherCall(l.layout, keys, maxInspectWaiters).LuaExec
	}
	out, err = inspected(out, name, scripts.InspectOther.ExecMulti(ctx, c.rc, others...), parseOtherState,
		func(i int) Kind { return otherLayouts[i].kind }, nil)
	if err != nil {
		return nil, err
	}
	if st, ok, err := c.inspectElection(ctx, name); err != nil {
		return nil, err
	} else if ok {
		out = append(out, st)
	}
	groups, err := c.inspectGroup(ctx, name)
	return append(out, groups...), err
}

// inspected appends to out the states found in the replies rs of an
// inspect script, decoded by parse (parseLockState, parseOtherState): rs[i]
// is of kind(i), and key(i), if key is not nil, its key.
func inspected(out []LockState, name string, rs []rueidis.RedisResult, parse func(rueidis.RedisResult) (LockState, bool, error),
	kind func(i int) Kind, key func(i int) string) ([]LockState, error) {
	for i, r := range rs {
		st, ok, err := parse(r)
		if err != nil {
			return out, wrapErr(kind(i), name, err)
		}
		if ok {
			st.Kind, st.Name = kind(i), name
			if key != nil {
				st.Key = key(i)
			}
			out = append(out, st)
		}
	}
	return out, nil
}

// parseOtherState decodes the reply of the InspectOther script.
func parseOtherState(r rueidis.RedisResult) (st LockState, ok bool, err error) {
	v, err := r.AsStrSlice()
	if err != nil {
		return st, false, err
	}
	bad := fmt.Errorf("unexpected inspect reply %q", v)
	if len(v) < 8 {
		return st, false, bad
	}
	num := func(s string) int64 {
		n, e := strconv.ParseInt(s, 10, 64)
		if e != nil && err == nil {
			err = bad
		}
		return n
	}
	if num(v[0]) == 0 {
		return st, false, err
	}
	st.LastToken = uint64(max(num(v[1]), 0))
	st.Mode = v[2]
	st.Size, st.Free = max(num(v[3]), 0), max(num(v[4]), 0)
	st.Done = v[5] == "1"
	st.Counter = max(num(v[6]), 0)
	nh := int(num(v[7]))
	rest := v[8:]
	if nh < 0 || len(rest) < 5*nh || (len(rest)-5*nh)%3 != 0 {
		return st, false, bad
	}
	for i := 0; i < nh; i++ {
		h := rest[5*i : 5*i+5]
		lease := time.Duration(num(h[3])) * time.Millisecond
		if lease < 0 {
			lease = -1
		}
		st.Holders = append(st.Holders, Holder{Owner: h[0], Count: num(h[1]), Token: uint64(max(num(h[2]), 0)), Lease: lease, Permits: num(h[4])})
	}
	for w := rest[5*nh:]; len(w) >= 3; w = w[3:] {
		st.Waiters = append(st.Waiters, Waiter{Owner: w[0], Place: time.Duration(num(w[1])) * time.Millisecond, Permits: num(w[2]), Count: 1})
	}
	return st, err == nil, err
}

// parseLockState decodes the reply of the inspect script; ok is false when
// the lock has no state at all.
func parseLockState(r rueidis.RedisResult) (st LockState, ok bool, err error) {
	vals, err := r.ToArray()
	if err != nil {
		return st, false, err
	}
	if len(vals) < 2 || (len(vals)-2)%3 != 0 {
		return st, false, fmt.Errorf("unexpected inspect reply of %d values", len(vals))
	}
	v, err := vals[0].ToString()
	if err != nil {
		return st, false, err
	}
	pttl, err := vals[1].AsInt64()
	if err != nil {
		return st, false, err
	}
	for i := 2; i < len(vals); i += 3 {
		w, err1 := vals[i].ToString()
		ms, err2 := vals[i+1].AsInt64()
		n, err3 := vals[i+2].AsInt64()
		if err1 != nil || err2 != nil || err3 != nil {
			return st, false, fmt.Errorf("unexpected waiter in inspect reply")
		}
		w, _, _ = strings.Cut(w, " ") // a FairMutex's queue member: "<owner> <wid> <lease>"
		st.Waiters = append(st.Waiters, Waiter{Owner: w, Place: time.Duration(ms) * time.Millisecond, Permits: 1, Count: n})
	}
	if v == "" {
		return st, len(st.Waiters) > 0, nil
	}
	f := strings.Fields(v)
	if len(f) >= 4 && len(f) <= 6 {
		// A Mutex's flags (a reserved block " b", a grant not claimed
		// in Redis " g", its binding to its Client's renewal session
		// " s<sid>", a waiter's mark " w"), or
		// the wait a FairMutex was granted to and the token before.
		f = f[:3]
	}
	if len(f) != 3 {
		return st, false, fmt.Errorf("unexpected lock value %q", v)
	}
	tok, err1 := strconv.ParseUint(f[1], 10, 64)
	n, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return st, false, fmt.Errorf("unexpected lock value %q", v)
	}
	st.LastToken = tok
	if f[0] != "-" {
		lease := time.Duration(pttl) * time.Millisecond
		if pttl < 0 {
			lease = -1
		}
		st.Holders = []Holder{{Owner: f[0], Count: n, Token: tok, Lease: lease, Permits: 1}}
	}
	return st, true, nil
}

// kindOfPart maps the kind's part of a key back to the Kind.
var kindOfPart = map[string]Kind{
	"mutex": KindMutex, "fair": KindFairMutex, "rw": KindRWMutex, "sem": KindSemaphore,
	"once": KindOnce, "oncevalue": KindOnce, "wg": KindWaitGroup,
	"group": KindGroup, "cond": KindCond,
}

// globEscape quotes the glob characters of s (Redis MATCH syntax), so that
// a key prefix such as "app[1]" matches itself.
func globEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 4)
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// List returns the locks under the Client's prefix whose name matches the
// glob pattern (Redis MATCH syntax; "" or "*" for all), sorted by name and
// kind. It walks every node with SCAN, not KEYS, so it does not block Redis,
// and like SCAN it may miss locks created or removed meanwhile. It is meant
// for tools, not for hot paths.
func (c *Client) List(ctx context.Context, pattern string) ([]LockRef, error) {
	if err := c.checkCall(ctx, nil); err != nil {
		return nil, err
	}
	if pattern == "" {
		pattern = "*"
	}
	match := globEscape(c.cfg.prefix) + ":{" + escapeName(pattern) + "}:*"
	seen := make(map[LockRef]bool)
	for _, node := range c.rc.Nodes() {
		var cursor uint64
		for {
			// Pinned as sharedDial pins read-only commands (pinResent).
			e, err := node.Do(ctx, pinResent(node.B().Scan().Cursor(cursor).Match(match).Count(1000).Build())).AsScanEntry()
			if err != nil {
				return nil, fmt.Errorf("dsync: list: %w", err)
			}
			for _, k := range e.Elements {
				name, rest, ok := splitKey(c.cfg.prefix, k)
				if !ok {
					continue
				}
				part, _, _ := strings.Cut(rest, ":")
				if r, ok := electionRef(name, part); ok {
					seen[r] = true
					continue
				}
				kind, ok := kindOfPart[part]
				if !ok {
					kind = Kind(part)
				}
				seen[LockRef{Kind: kind, Name: name}] = true
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	out := make([]LockRef, 0, len(seen))
	for r := range seen {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b LockRef) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(string(a.Kind), string(b.Kind))
	})
	return out, nil
}
