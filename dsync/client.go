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
// deployment. It owns the machinery every lock shares: one renewal loop for
// all held locks, one pub/sub connection for wakeups (in a Redis 7 cluster,
// sharded subscriptions on the rueidis client's connections to the masters
// instead), and the local queues that let goroutines of this process wait
// for a lock without each talking to Redis.
//
// A Client is safe for concurrent use. Create one per process and prefix,
// and Close it when done. Close does not close a rueidis client passed to
// NewClient; it closes the one Dial made.
type Client struct {
	rc    rueidis.Client
	owned rueidis.Client // made by Dial, closed by Close; nil from NewClient
	// connDoubt is when a call last failed without a reply from Redis (unix
	// ns; see sharedDial and boundedIfDoubt).
	connDoubt atomic.Int64
	cfg       config
	cluster   bool // rc is a cluster client
	sharded   bool // wakeups use sharded pub/sub (a Redis 7 cluster)

	closed atomic.Bool
	done   chan struct{}
	ctx    context.Context // cancelled by Close, for the Client's own calls
	cancel context.CancelFunc
	loops  sync.WaitGroup // the renewal loop and the notifier
	// preloaded is closed when the preload of the scripts has ended (tests
	// that count commands wait for it).
	preloaded chan struct{}
	bg        sync.WaitGroup // cleanups handed to the background
	timers    sync.WaitGroup // runs of the lease clock's timer to come (see leaseClock.arm)

	notify *notifier
	renew  *renewer
	clock  leaseClock

	mu    sync.Mutex
	holds map[*hold]struct{} // every hold of this Client, for Close
	// mutexes is the registry of per-lock state in this process (see
	// stateKey); semHolds the Semaphore acquisitions held through this
	// Client, by semaphore key and owner, oldest first (guarded by mu).
	mutexes map[stateKey]*mutexState
	// spareStates are states that left the registry, for the next lock
	// that needs one: an uncontended cycle then allocates none.
	spareStates []*mutexState
	semHolds    map[string]map[string][]*hold
	// peaks of the maps above, for compact
	holdsPeak, mutexesPeak int

	holdSeq atomic.Uint64

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
// close it before the Client.
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
		preloaded: make(chan struct{}),
		holds:     make(map[*hold]struct{}),
		mutexes:   make(map[stateKey]*mutexState),
		id:        newID()[:16] + "-",
	}
	c.rc = sharedDial{Client: rc, doubt: &c.connDoubt}
	c.ident = cfg.name + "/" + c.id[:16]
	c.args.lease, c.args.mark = leaseMS(cfg.lease), leaseMS(freeMarkerTTL)
	c.args.handoffs = strconv.Itoa(cfg.handoffs)
	c.clock.c = c
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.sharded = c.cluster && shardedPubSub(rc)
	c.notify = newNotifier(c)
	c.renew = newRenewer(c)
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

// Close stops the renewal loop and the wakeup subscription, ends every wait
// in progress with ErrClosed, and releases the locks still held through the
// Client (best effort, within a second), cancelling their lock contexts with
// cause ErrClosed. No goroutine of the Client outlives Close. Calls after
// Close return ErrClosed. Close is idempotent.
func (c *Client) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(c.done)
	c.mu.Lock()
	holds := make([]*hold, 0, len(c.holds))
	for h := range c.holds {
		holds = append(holds, h)
	}
	c.mu.Unlock()
	for _, h := range holds {
		h.beginRelease() // a renewal in flight must not report them lost
	}
	c.releaseOnClose(holds)
	for _, h := range holds {
		h.end(ErrClosed, false)
	}
	c.clock.close()
	c.cancel()
	c.loops.Wait()
	c.bg.Wait()
	c.timers.Wait()
	if c.owned != nil {
		c.owned.Close() // the Client is done with it: Dial made it
	}
	return nil
}

// releaseOnClose releases holds in Redis in one pipelined round per script.
func (c *Client) releaseOnClose(holds []*hold) {
	if len(holds) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	groups := make(map[*rueidis.Lua][]rueidis.LuaExec)
	for _, h := range holds {
		s, e := h.ops.releaseExec(h)
		s = c.lua(s)
		groups[s] = append(groups[s], e)
	}
	for s, execs := range groups {
		for _, r := range s.ExecMulti(ctx, c.rc, execs...) {
			if err := r.Error(); err != nil {
				c.cfg.logger.Warn("dsync: release on close failed", "err", err)
			}
		}
	}
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
