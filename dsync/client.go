package dsync

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// A Client gives access to the locks under one key prefix of one Redis
// deployment, and runs what they share: the renewal of held locks, the
// wakeups, the local queues. A Client is safe for concurrent use. Its zero
// value is not usable: create one per process and prefix with Dial or
// NewClient, and Close it when done.
type Client struct {
	// Guards (lock order: see locking.go): the fields NewClient sets are
	// read-only after it; the atomics are atomic; mu guards nbg, bgIdle,
	// sealed and the maps and lists from mutexes to the peaks (and each
	// mutexState's refs); the WaitGroups and channels are their own.

	rc    rueidis.Client
	owned rueidis.Client // made by Dial, closed by Close; nil from NewClient
	// connDoubt is when a call last failed without a reply from Redis (unix
	// ns; see sharedDial and inDoubt).
	connDoubt atomic.Int64
	cfg       config
	cluster   bool // rc is a cluster client
	sharded   bool // wakeups use sharded pub/sub (a Redis 7 cluster)

	closed atomic.Bool
	// catchingUp counts the checks of every hold running after the control
	// channel's subscription was confirmed (controlLive).
	catchingUp atomic.Int32
	done       chan struct{}
	ctx        context.Context // cancelled by Close, for the Client's own calls
	cancel     context.CancelFunc
	// cleanCtx is the context of cleanups (background): it outlives ctx,
	// so that the cleanups of waits that Close ended still run while the
	// Client closes, and is cancelled when closeTimeout has passed.
	cleanCtx    context.Context
	cleanCancel context.CancelFunc
	loops       sync.WaitGroup // the renewal loop and the notifier
	// preloaded is closed when the preload of the scripts has ended (tests
	// that count commands wait for it).
	preloaded chan struct{}
	timers    sync.WaitGroup // runs of the lease clock's timer to come (see leaseClock.armLocked)

	// ops counts the calls in progress (see enter); opsIdle is closed by
	// the last one to leave once the Client is closed, so that Close knows
	// that every wait it ended has handed its cleanup to the background.
	ops     atomic.Int64
	opsIdle chan struct{}
	opsOnce sync.Once
	// nbg counts the cleanups running in the background; bgIdle, when set,
	// is closed when nbg drops to 0 (Close waits on it). sealed: Close has
	// drained them, and no cleanup starts any more. All three guarded by
	// mu.
	nbg    int
	bgIdle chan struct{}
	sealed bool

	// fn is the Client's use of the function library (functions.go).
	fn funcState

	notify *notifier
	renew  *renewer
	clock  leaseClock
	late   lateUndos // the later undo runs of lost attempts (lateundo.go)
	// waits are the goroutines waiting in this Client's Mutex queues, for
	// Inspect.
	waits localWaiters
	// tags keeps the holds' tags when the observer tags holds
	// (Observer.HoldTag); nil otherwise.
	tags *tagger

	// mu guards mutexes..mutexesPeak below, nbg, bgIdle and sealed above,
	// every mutexState's refs, and a hold's tracking (hold.trackUntil):
	// every hold of this Client is one the clock watches (leaseClock.each),
	// which Close collects under mu.
	mu sync.Mutex
	// mutexes is the registry of per-lock state in this process (see
	// stateKey, getMutex): by the lock's key alone (a Mutex, a FairMutex),
	// and in mutexesBy for the keys with a slot (an RWMutex), so that an
	// entry of the common kind costs a string, not three (held locks: 100k
	// Mutexes cost about 50 B less each); semHolds the Semaphore
	// acquisitions held through this Client, by semaphore key and owner,
	// oldest first.
	mutexes   map[string]*mutexState
	mutexesBy map[stateKey]*mutexState
	// spareStates are states that left the registry, for the next lock
	// that needs one: an uncontended cycle then allocates none.
	spareStates []*mutexState
	semHolds    map[string]map[string][]*hold
	// terms are the Election terms with a watchdog whose record the
	// renewer keeps, by their lock's hold (see Election.keep).
	terms map[*hold]termRecord
	// peaks of the maps above, for compact
	mutexesPeak, mutexesByPeak int

	holdSeq atomic.Uint64

	// srv is the server clock as the Client last saw it, and ownerSeq
	// counts the Mutex owners made with a deadline (srvclock.go).
	srv      serverClock
	ownerSeq atomic.Uint32

	// id and attemptSeq name acquisition attempts (see Client.attemptID).
	id         string
	attemptSeq atomic.Uint64
	// args are the script arguments every lock of the Client shares:
	// the lease and the free-marker lifetime in ms, WithMaxLocalHandoffs.
	args struct{ lease, mark, handoffs string }

	// ident names this Client where Redis records it as a whole (a Mutex's
	// waiting count): "<client name>/<16 hex digits>".
	ident string
}

// attemptID returns a name for one acquisition attempt, unique across
// Clients and processes.
func (c *Client) attemptID() string {
	return c.id + strconv.FormatUint(c.attemptSeq.Add(1), 36)
}

// NewClient returns a Client using rc, which may be a standalone, sentinel
// or cluster rueidis client. The caller keeps ownership of rc and must not
// close it before the Client; Close leaves it open.
func NewClient(rc rueidis.Client, opts ...Option) (*Client, error) {
	if rc == nil {
		return nil, fmt.Errorf("%w: nil rueidis client", ErrInvalidArgument)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	c := &Client{
		cfg:       cfg,
		cluster:   rc.Mode() == rueidis.ClientModeCluster,
		done:      make(chan struct{}),
		opsIdle:   make(chan struct{}),
		preloaded: make(chan struct{}),
		mutexes:   make(map[string]*mutexState),
		mutexesBy: make(map[stateKey]*mutexState),
		id:        newID()[:16] + "-",
	}
	c.rc = sharedDial{Client: rc, doubt: &c.connDoubt}
	c.ident = cfg.name + "/" + c.id[:16]
	c.args.lease, c.args.mark = leaseMS(cfg.lease), leaseMS(freeMarkerTTL)
	c.args.handoffs = strconv.Itoa(cfg.handoffs)
	c.clock.c = c
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.cleanCtx, c.cleanCancel = context.WithCancel(context.Background())
	c.sharded = c.cluster && shardedPubSub(rc)
	c.notify = newNotifier(c)
	c.renew = newRenewer(c)
	c.waits.c = c
	if cfg.observer.HoldTag != nil {
		c.tags = newTagger(c)
	}
	c.loops.Add(3)
	go c.notify.loop()
	go c.renew.loop()
	go c.renew.preload()
	return c, nil
}

// newConfig applies opts to the defaults and checks the result.
func newConfig(opts []Option) (config, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if err := cfg.validate(); err != nil {
		return cfg, err
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	if cfg.name == "" {
		cfg.name = processName()
	}
	return cfg, nil
}

// closeTimeout bounds Close: the waits it ends returning, the releases
// of what the Client holds and the cleanups in the background (leaving
// queues, handing on grants, removing tags); what is left undone then
// expires with its lease.
const closeTimeout = 2 * time.Second

// Close releases every hold of the Client, cancelling its lock context with
// cause ErrClosed, ends every wait with ErrClosed, and stops the Client;
// calls after Close return ErrClosed. A running Once or Group f is not
// waited for: its run fails. Close gives Redis 2 s; what is left then
// expires with its lease. It closes the rueidis client Dial made. No
// goroutine of the Client outlives Close. Close is idempotent.
func (c *Client) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	// One budget for all of it; cleanups run under cleanCtx, cancelled
	// when it has run out.
	dctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	stop := context.AfterFunc(dctx, c.cleanCancel)
	defer stop()
	close(c.done)
	// The calls in progress return (their waits see done), handing what
	// they must undo to the background, which still runs.
	if c.ops.Load() != 0 {
		select {
		case <-c.opsIdle:
		case <-dctx.Done():
		}
	}
	c.cancel()
	// A renewal round in flight ends first: its session batches must not
	// run in Redis after the releases below (see renewer.takeOff).
	<-c.renew.exited
	var holds []*hold
	c.mu.Lock()
	c.clock.each(func(h *hold) { holds = append(holds, h) })
	c.mu.Unlock()
	c.releaseOnClose(holds)
	c.clock.close()
	// The cleanups run until done or closeTimeout; then no more start.
	c.waitBackground(dctx.Done())
	c.cleanCancel()
	c.mu.Lock()
	c.sealed = true
	c.mu.Unlock()
	c.waitBackground(nil)
	c.loops.Wait()
	c.timers.Wait()
	if c.owned != nil {
		c.owned.Close() // the Client is done with it: Dial made it
	}
	return nil
}

// enter counts a call in progress, which Close waits for; it returns
// ErrClosed (counting nothing) once the Client is closed. Every call that
// can leave something in Redis runs between enter and exit.
func (c *Client) enter() error {
	if err := c.checkOpen(); err != nil { // a zero-value primitive panics there
		return err
	}
	c.ops.Add(1)
	if c.closed.Load() {
		c.exit()
		return ErrClosed
	}
	return nil
}

// exit ends a call counted by enter.
func (c *Client) exit() {
	if c.ops.Add(-1) == 0 && c.closed.Load() {
		c.opsOnce.Do(func() { close(c.opsIdle) })
	}
}

// waitBackground waits until no cleanup runs in the background, or stop.
func (c *Client) waitBackground(stop <-chan struct{}) {
	c.mu.Lock()
	if c.nbg == 0 {
		c.mu.Unlock()
		return
	}
	if c.bgIdle == nil {
		c.bgIdle = make(chan struct{})
	}
	idle := c.bgIdle
	c.mu.Unlock()
	select {
	case <-idle:
	case <-stop:
	}
}

// holdCloser is a holdOps that must run a script of its own before the
// hold's release at Close (an Election's term: the record of its end).
type holdCloser interface {
	closeExec(h *hold) (*rueidis.Lua, rueidis.LuaExec, bool)
}

// releaseBatch bounds the holds released by one batch script call at
// Close (MutexReleaseMany). TestCloseReleasesInBatches counts the calls
// by it (ReleaseBatch).
const releaseBatch = 128

// batchReleaser is a holdOps whose holds Close releases many per script
// call (MutexReleaseMany): releaseKey names the lock's key and the hold as
// Redis knows it, its owner and token, and the last token issued under
// it. ok false: releaseExec.
type batchReleaser interface {
	releaseKey(h *hold) (key, owner string, token, used uint64, ok bool)
}

// releaseOnClose ends holds and releases them in Redis. Each hold's lock
// contexts end before its release is sent, so that no holder here still
// believes in a lock that another Client can take as soon as it is
// released.
//
// The holds of a batchReleaser go first, in batch script calls per cluster
// slot (releaseBatch holds each), and as a stream: a batch is sent as soon
// as its holds are ended, while the next ones are, so the first wakeups
// reach other Clients' waiters before the last holds are even ended (with
// 10,000 holds, ending them all took about as long as Redis took to
// release the first few thousand). Then the other holds: a round for
// those that end otherwise first (holdCloser), and one pipelined round per
// release script.
func (c *Client) releaseOnClose(holds []*hold) {
	if len(holds) == 0 {
		return
	}
	ctx := c.cleanCtx // cancelled when closeTimeout has run out
	warn := func(err error) {
		if err != nil {
			c.cfg.logger.Warn("dsync: release on close failed", "err", err)
		}
	}
	end := func(h *hold) {
		h.beginRelease() // a renewal in flight must not report it lost
		h.end(ErrClosed, false)
	}
	var send *closeSender
	batches := map[uint16]*renewCall{}
	rest := holds[:0]
	for _, h := range holds {
		br, ok := h.ops.(batchReleaser)
		if !ok {
			rest = append(rest, h)
			continue
		}
		key, owner, token, used, ok := br.releaseKey(h)
		if !ok {
			rest = append(rest, h)
			continue
		}
		end(h)
		var slot uint16
		if c.cluster {
			cmd := c.rc.B().Get().Key(key).Build()
			slot = cmd.Slot()
		}
		b := batches[slot]
		if b == nil {
			b = &renewCall{s: scripts.MutexReleaseMany}
			batches[slot] = b
		}
		// The hold's value prefix is made here, not taken from
		// renewValue's cache, which is the renewal loop's.
		b.e.Keys, b.e.Args = scripts.AppendMutexReleaseManyHold(b.e.Keys, b.e.Args, key, owner, token, used)
		if len(b.e.Keys) == releaseBatch {
			if send == nil {
				send = c.newCloseSender(ctx, warn)
			}
			send.send(*b)
			delete(batches, slot)
		}
	}
	if len(batches) > 0 && send == nil {
		send = c.newCloseSender(ctx, warn)
	}
	for _, b := range batches {
		send.send(*b)
	}
	first := make(map[*rueidis.Lua][]rueidis.LuaExec)
	groups := make(map[*rueidis.Lua][]rueidis.LuaExec)
	for _, h := range rest {
		end(h)
	}
	for _, h := range rest {
		if hc, ok := h.ops.(holdCloser); ok {
			if s, e, ok := hc.closeExec(h); ok {
				s = c.lua(s)
				first[s] = append(first[s], e)
			}
		}
		s, e := h.ops.releaseExec(h)
		s = c.lua(s)
		groups[s] = append(groups[s], e)
	}
	for s, execs := range first {
		for _, r := range s.ExecMulti(ctx, c.rc, execs...) {
			warn(r.Error())
		}
	}
	for s, execs := range groups {
		for _, r := range s.ExecMulti(ctx, c.rc, execs...) {
			warn(r.Error())
		}
	}
	if send != nil {
		send.wait()
	}
}

// A closeSender sends Close's batch release calls on a goroutine of its
// own, as they come: each pipeline takes every call that came while the
// one before was out (the first, one call at once), so Redis is at work
// while Close is still ending holds.
type closeSender struct {
	calls chan renewCall
	done  chan struct{}
}

func (c *Client) newCloseSender(ctx context.Context, warn func(error)) *closeSender {
	s := &closeSender{calls: make(chan renewCall, 64), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		var calls []renewCall
		for call := range s.calls {
			calls = append(calls[:0], call)
			for more := true; more; {
				select {
				case call, ok := <-s.calls:
					if !ok {
						more = false
						break
					}
					calls = append(calls, call)
				default:
					more = false
				}
			}
			for _, r := range c.renew.exec(ctx, calls) {
				_, err := r.AsIntSlice()
				warn(err)
			}
		}
	}()
	return s
}

func (s *closeSender) send(call renewCall) { s.calls <- call }

// wait ends the stream and waits until every call sent has been answered.
func (s *closeSender) wait() {
	close(s.calls)
	<-s.done
}

// shardedProbeTimeout bounds the question NewClient asks a cluster.
const shardedProbeTimeout = 2 * time.Second

// shardedPubSub reports whether the cluster behind rc has sharded pub/sub
// (Redis 7). A server that rejects the command (Redis 6; a stand-in such as
// miniredis, which answers CLUSTER SLOTS and so gets a cluster client) does
// not; one that cannot be asked now is assumed to.
func shardedPubSub(rc rueidis.Client) bool {
	ctx, cancel := context.WithTimeout(context.Background(), shardedProbeTimeout)
	defer cancel()
	err := rc.Do(ctx, rc.B().PubsubShardnumsub().Build()).Error()
	return err == nil || !isRedisErr(err)
}

// lua returns the variant of a script for this Client's deployment: with
// sharded pub/sub, scripts publish wakeups with SPUBLISH (see notifier).
func (c *Client) lua(l *rueidis.Lua) *rueidis.Lua {
	if c.sharded {
		return scripts.Sharded(l)
	}
	return l
}

// run runs call as a script (EVALSHA, with EVAL after NOSCRIPT), in the
// deployment's variant (lua).
func (c *Client) run(ctx context.Context, call scripts.Call) rueidis.RedisResult {
	return c.lua(call.Script).Exec(ctx, c.rc, call.Keys, call.Args)
}
