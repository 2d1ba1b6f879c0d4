package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/dsync/dsync/dsync"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// A handle is one owner's view of one lock, used by one goroutine at a time:
// Lock blocks until held (or ctx ends), Unlock releases what Lock took.
type handle interface {
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
}

// A lib is one lock implementation connected to the bench's Redis. Every
// lib counts its client round trips (one per command or pipeline sent and
// awaited) in rt.
type lib interface {
	handle(key string) handle
	close()
}

type libSpec struct {
	name string
	note string
	lock bool // false: not a lock (floor), skipped where mutual exclusion matters
	open func(addr string, rt *atomic.Int64) (lib, error)
	// keyed opens the lib with every key it writes under prefix, for the
	// keys scenario (nil: the lib does not run there).
	keyed func(addr, prefix string, rt *atomic.Int64) (lib, error)
}

// fixedTTL is the lease of the libs that have no watchdog. It is far longer
// than any hold in the bench, so no lock expires while held.
const fixedTTL = 8 * time.Second

var libs = []libSpec{
	{name: "dsync", note: "dsync Mutex, default (in-process handoffs from a reserved token block of 32, then a yield check)", lock: true,
		open: openDsync(dsync.DefaultMaxLocalHandoffs), keyed: keyedDsync(false)},
	{name: "dsync-h0", note: "dsync Mutex, WithMaxLocalHandoffs(0): no cohorting", lock: true, open: openDsync(0)},
	{name: "raw", note: "rueidis SET NX PX + EVALSHA compare-and-delete, 1 ms spin", lock: true, open: openRaw, keyed: keyedRaw},
	{name: "floor", note: "two PINGs per op (not a lock)", open: openFloor},
	{name: "rueidislock", note: "rueidislock KeyMajority 1, NoLoopTracking", lock: true, open: openRueidislock},
	{name: "redsync", note: "redsync v4 + go-redis v9, default options", lock: true, open: openRedsync(0)},
	{name: "redsync-1ms", note: "redsync v4 + go-redis v9, WithRetryDelay(1ms)", lock: true, open: openRedsync(time.Millisecond)},
	{name: "redislock", note: "bsm/redislock, LinearBackoff(1ms)", lock: true, open: openRedislock},
}

// fifoSpec is the FIFO lock in the handoff scenario: a waiter in another
// process is granted the lock by the release.
var fifoSpec = libSpec{name: "dsync-fair", note: "dsync FairMutex, default options", lock: true, open: openDsyncFair}

// wakeSpec is the floor of any cross-process handoff through Redis, in
// the handoff scenario only: not a lock. The waiting process subscribes to
// a channel and waits, parked, for one message; the release is one
// PUBLISH. So a round is one command's trip to Redis, the push to the other
// process and that process waking up: what a grant pushed by the release
// (one hop) costs at least.
var wakeSpec = libSpec{name: "wake", note: "not a lock: PUBLISH to a parked subscriber in another process, the one-hop floor (handoff scenario only)", open: openWake}

// lockerSpec is the Mutex through sync.Locker (m.Lock(); m.Unlock()),
// issue 14's second uncontended path: it runs in serial and keys only.
var lockerSpec = libSpec{name: "dsync-locker", note: "dsync Mutex through sync.Locker (m.Lock(); m.Unlock()), default options: serial and keys scenarios only", lock: true,
	open: func(addr string, rt *atomic.Int64) (lib, error) {
		return newDsync(addr, rt, true, dsync.WithMaxLocalHandoffs(dsync.DefaultMaxLocalHandoffs))
	},
	keyed: keyedDsync(true)}

// allSpecs is every lib the report can name: the peers, then the dsync
// variants that run in some scenarios only.
func allSpecs() []libSpec {
	return append(libs[:len(libs):len(libs)], lockerSpec, tracedSpec, fifoSpec, wakeSpec)
}

func specByName(name string) (libSpec, error) {
	for _, s := range allSpecs() {
		if s.name == name {
			return s, nil
		}
	}
	return libSpec{}, fmt.Errorf("unknown lib %q", name)
}

func newRueidis(addr string, rt *atomic.Int64) (rueidis.Client, error) {
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	return &countingClient{Client: rc, rt: rt}, nil
}

// countingClient counts round trips through a rueidis.Client, including
// those on dedicated connections (dsync subscribes on one).
type countingClient struct {
	rueidis.Client
	rt *atomic.Int64
}

func (c *countingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.rt.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c *countingClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.rt.Add(1)
	return c.Client.DoMulti(ctx, cmds...)
}

func (c *countingClient) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	c.rt.Add(1) // an upper bound: a cache hit makes no round trip
	return c.Client.DoCache(ctx, cmd, ttl)
}

func (c *countingClient) DoMultiCache(ctx context.Context, cmds ...rueidis.CacheableTTL) []rueidis.RedisResult {
	c.rt.Add(1)
	return c.Client.DoMultiCache(ctx, cmds...)
}

func (c *countingClient) Dedicated(fn func(rueidis.DedicatedClient) error) error {
	return c.Client.Dedicated(func(dc rueidis.DedicatedClient) error {
		return fn(&countingDedicated{DedicatedClient: dc, rt: c.rt})
	})
}

func (c *countingClient) Dedicate() (rueidis.DedicatedClient, func()) {
	dc, cancel := c.Client.Dedicate()
	return &countingDedicated{DedicatedClient: dc, rt: c.rt}, cancel
}

type countingDedicated struct {
	rueidis.DedicatedClient
	rt *atomic.Int64
}

func (c *countingDedicated) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.rt.Add(1)
	return c.DedicatedClient.Do(ctx, cmd)
}

func (c *countingDedicated) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.rt.Add(1)
	return c.DedicatedClient.DoMulti(ctx, cmds...)
}

// dsync

type dsyncLib struct {
	rc rueidis.Client
	c  *dsync.Client
	// locker: handles go through sync.Locker (Lock, Unlock) instead of
	// LockContext and UnlockContext.
	locker bool
}

func newDsync(addr string, rt *atomic.Int64, locker bool, opts ...dsync.Option) (*dsyncLib, error) {
	rc, err := newRueidis(addr, rt)
	if err != nil {
		return nil, err
	}
	c, err := dsync.NewClient(rc, opts...)
	if err != nil {
		rc.Close()
		return nil, err
	}
	return &dsyncLib{rc: rc, c: c, locker: locker}, nil
}

func openDsync(handoffs int) func(string, *atomic.Int64) (lib, error) {
	return func(addr string, rt *atomic.Int64) (lib, error) {
		return newDsync(addr, rt, false, dsync.WithMaxLocalHandoffs(handoffs))
	}
}

// keyedDsync opens a default-options dsync Client whose every key is under
// prefix (WithKeyPrefix: "the prefix of every key and channel").
func keyedDsync(locker bool) func(string, string, *atomic.Int64) (lib, error) {
	return func(addr, prefix string, rt *atomic.Int64) (lib, error) {
		return newDsync(addr, rt, locker, dsync.WithMaxLocalHandoffs(dsync.DefaultMaxLocalHandoffs), dsync.WithKeyPrefix(prefix))
	}
}

type dsyncFairLib struct{ *dsyncLib }

func openDsyncFair(addr string, rt *atomic.Int64) (lib, error) {
	l, err := openDsync(dsync.DefaultMaxLocalHandoffs)(addr, rt)
	if err != nil {
		return nil, err
	}
	return dsyncFairLib{l.(*dsyncLib)}, nil
}

func (l dsyncFairLib) handle(key string) handle { return &lockerHandle{l: l.c.NewFairMutex(key)} }

func (l *dsyncLib) handle(key string) handle {
	if l.locker {
		return syncLockerHandle{m: l.c.NewMutex(key)}
	}
	return &dsyncHandle{m: l.c.NewMutex(key)}
}
func (l *dsyncLib) close() { l.c.Close(); l.rc.Close() }

// syncLockerHandle takes the Mutex as a sync.Locker: Lock waits until held
// whatever ctx says (the serial and keys scenarios never contend).
type syncLockerHandle struct{ m *dsync.Mutex }

func (h syncLockerHandle) Lock(context.Context) error   { h.m.Lock(); return nil }
func (h syncLockerHandle) Unlock(context.Context) error { h.m.Unlock(); return nil }

type dsyncHandle struct {
	m    *dsync.Mutex
	lctx context.Context
}

func (h *dsyncHandle) Lock(ctx context.Context) (err error) {
	h.lctx, err = h.m.LockContext(ctx)
	return err
}

func (h *dsyncHandle) Unlock(context.Context) error { return h.m.UnlockContext(h.lctx) }

// token is the fencing token of the hold Lock took (tokener).
func (h *dsyncHandle) token() uint64 {
	t, _ := dsync.FencingToken(h.lctx)
	return t
}

// A tokener tells the fencing token of its last acquisition: the bench
// tells an acquisition in Redis (a token that does not follow the one
// before) from a handoff inside the process (tailOf).
type tokener interface{ token() uint64 }

// raw: the minimal correct lock, two round trips when uncontended.

var rawRelease = rueidis.NewLuaScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

type rawLib struct{ rc rueidis.Client }

func openRaw(addr string, rt *atomic.Int64) (lib, error) {
	rc, err := newRueidis(addr, rt)
	if err != nil {
		return nil, err
	}
	return &rawLib{rc: rc}, nil
}

func (l *rawLib) close() { l.rc.Close() }

// keyedRaw is the raw lock whose key is prefix:name.
func keyedRaw(addr, prefix string, rt *atomic.Int64) (lib, error) {
	l, err := openRaw(addr, rt)
	if err != nil {
		return nil, err
	}
	return prefixedLib{lib: l, prefix: prefix}, nil
}

type prefixedLib struct {
	lib
	prefix string
}

func (l prefixedLib) handle(name string) handle { return l.lib.handle(l.prefix + ":" + name) }

func (l *rawLib) handle(key string) handle {
	var b [16]byte
	_, _ = rand.Read(b[:])
	// The token is unique per handle, and a handle is one goroutine's, so it
	// is unique per holder: a late release can only delete its own lock.
	return &rawHandle{rc: l.rc, key: key, token: hex.EncodeToString(b[:]), keys: []string{key}}
}

type rawHandle struct {
	rc         rueidis.Client
	key, token string
	keys, args []string
}

func (h *rawHandle) Lock(ctx context.Context) error {
	for {
		err := h.rc.Do(ctx, h.rc.B().Set().Key(h.key).Value(h.token).Nx().PxMilliseconds(fixedTTL.Milliseconds()).Build()).Error()
		if err == nil {
			return nil
		}
		if !rueidis.IsRedisNil(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

func (h *rawHandle) Unlock(ctx context.Context) error {
	if h.args == nil {
		h.args = []string{h.token}
	}
	n, err := rawRelease.Exec(ctx, h.rc, h.keys, h.args).AsInt64()
	if err == nil && n != 1 {
		err = errors.New("raw: lock was not held")
	}
	return err
}

// floor: what two round trips cost, without any lock.

type floorLib struct{ rc rueidis.Client }

func openFloor(addr string, rt *atomic.Int64) (lib, error) {
	rc, err := newRueidis(addr, rt)
	if err != nil {
		return nil, err
	}
	return &floorLib{rc: rc}, nil
}

func (l *floorLib) close()               { l.rc.Close() }
func (l *floorLib) handle(string) handle { return floorHandle{l.rc} }

type floorHandle struct{ rc rueidis.Client }

func (h floorHandle) Lock(ctx context.Context) error {
	return h.rc.Do(ctx, h.rc.B().Ping().Build()).Error()
}
func (h floorHandle) Unlock(ctx context.Context) error { return h.Lock(ctx) }

// wake: the one-hop floor of the handoff scenario (wakeSpec).

type wakeLib struct{ rc rueidis.Client }

func openWake(addr string, rt *atomic.Int64) (lib, error) {
	rc, err := newRueidis(addr, rt)
	if err != nil {
		return nil, err
	}
	return &wakeLib{rc: rc}, nil
}

func (l *wakeLib) close() { l.rc.Close() }
func (l *wakeLib) handle(key string) handle {
	return wakeHandle{rc: l.rc, ch: "bench:wake:" + key, waiter: inChild}
}

// inChild is set in a child process (-child), where a wakeHandle waits.
var inChild bool

// wakeHandle's Lock returns at once in the holder (the bench process) and,
// in the waiting child, when a message comes on ch; Unlock publishes in the
// holder and does nothing in the child.
type wakeHandle struct {
	rc     rueidis.Client
	ch     string
	waiter bool
}

func (h wakeHandle) Lock(ctx context.Context) error {
	if !h.waiter {
		return nil
	}
	rctx, got := context.WithCancel(ctx)
	defer got()
	err := h.rc.Receive(rctx, h.rc.B().Subscribe().Channel(h.ch).Build(), func(rueidis.PubSubMessage) { got() })
	if rctx.Err() != nil && ctx.Err() == nil {
		return nil // the message came
	}
	if err == nil {
		err = errors.New("wake: subscription ended without a message")
	}
	return err
}

func (h wakeHandle) Unlock(ctx context.Context) error {
	if h.waiter {
		return nil
	}
	return h.rc.Do(ctx, h.rc.B().Publish().Channel(h.ch).Message("1").Build()).Error()
}

// rueidislock

type rueidislockLib struct{ l rueidislock.Locker }

func openRueidislock(addr string, rt *atomic.Int64) (lib, error) {
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{addr}},
		KeyMajority:    1,
		NoLoopTracking: true,
		ClientBuilder: func(o rueidis.ClientOption) (rueidis.Client, error) {
			rc, err := rueidis.NewClient(o)
			if err != nil {
				return nil, err
			}
			return &countingClient{Client: rc, rt: rt}, nil
		},
	})
	if err != nil {
		return nil, err
	}
	return &rueidislockLib{l: l}, nil
}

func (l *rueidislockLib) close()                   { l.l.Close() }
func (l *rueidislockLib) handle(key string) handle { return &rueidislockHandle{l: l.l, key: key} }

type rueidislockHandle struct {
	l      rueidislock.Locker
	key    string
	cancel context.CancelFunc
}

func (h *rueidislockHandle) Lock(ctx context.Context) (err error) {
	_, h.cancel, err = h.l.WithContext(ctx, h.key)
	return err
}

func (h *rueidislockHandle) Unlock(context.Context) error { h.cancel(); return nil }

// go-redis based peers

type countHook struct{ rt *atomic.Int64 }

func (h countHook) DialHook(next goredislib.DialHook) goredislib.DialHook { return next }
func (h countHook) ProcessHook(next goredislib.ProcessHook) goredislib.ProcessHook {
	return func(ctx context.Context, cmd goredislib.Cmder) error { h.rt.Add(1); return next(ctx, cmd) }
}
func (h countHook) ProcessPipelineHook(next goredislib.ProcessPipelineHook) goredislib.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredislib.Cmder) error { h.rt.Add(1); return next(ctx, cmds) }
}

func newGoRedis(addr string, rt *atomic.Int64) *goredislib.Client {
	c := goredislib.NewClient(&goredislib.Options{Addr: addr})
	c.AddHook(countHook{rt})
	return c
}

type redsyncLib struct {
	c    *goredislib.Client
	rs   *redsync.Redsync
	opts []redsync.Option
}

func openRedsync(delay time.Duration) func(string, *atomic.Int64) (lib, error) {
	return func(addr string, rt *atomic.Int64) (lib, error) {
		c := newGoRedis(addr, rt)
		l := &redsyncLib{c: c, rs: redsync.New(goredis.NewPool(c)), opts: []redsync.Option{redsync.WithExpiry(fixedTTL)}}
		if delay > 0 {
			l.opts = append(l.opts, redsync.WithRetryDelay(delay))
		}
		return l, nil
	}
}

func (l *redsyncLib) close() { l.c.Close() }
func (l *redsyncLib) handle(key string) handle {
	return &redsyncHandle{m: l.rs.NewMutex(key, l.opts...)}
}

type redsyncHandle struct{ m *redsync.Mutex }

// Lock retries past redsync's ErrFailed (its 32 tries ran out) until ctx
// ends, since every other lib here waits until it holds.
func (h *redsyncHandle) Lock(ctx context.Context) error {
	for {
		err := h.m.LockContext(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var taken *redsync.ErrTaken
		var nodeTaken *redsync.ErrNodeTaken
		if !errors.Is(err, redsync.ErrFailed) && !errors.As(err, &taken) && !errors.As(err, &nodeTaken) {
			return err
		}
	}
}

func (h *redsyncHandle) Unlock(ctx context.Context) error {
	ok, err := h.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock returned false")
	}
	return err
}

type redislockLib struct {
	c   *goredislib.Client
	rl  *redislock.Client
	opt *redislock.Options
}

func openRedislock(addr string, rt *atomic.Int64) (lib, error) {
	c := newGoRedis(addr, rt)
	return &redislockLib{c: c, rl: redislock.New(c), opt: &redislock.Options{RetryStrategy: redislock.LinearBackoff(time.Millisecond)}}, nil
}

func (l *redislockLib) close() { l.c.Close() }
func (l *redislockLib) handle(key string) handle {
	return &redislockHandle{l: l, key: key}
}

type redislockHandle struct {
	l    *redislockLib
	key  string
	lock *redislock.Lock
}

// Lock retries past redislock's implicit deadline (the TTL, when ctx has
// none) until ctx ends.
func (h *redislockHandle) Lock(ctx context.Context) error {
	for {
		lk, err := h.l.rl.Obtain(ctx, h.key, fixedTTL, h.l.opt)
		if err == nil {
			h.lock = lk
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(err, redislock.ErrNotObtained) && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
}

func (h *redislockHandle) Unlock(ctx context.Context) error { return h.lock.Release(ctx) }
