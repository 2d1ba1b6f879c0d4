package dsync

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Defaults, applied by NewClient and the New... constructors.
const (
	// DefaultKeyPrefix starts every key and channel dsync writes.
	DefaultKeyPrefix = "dsync"
	// DefaultLease is the watchdog lease: a held lock lives this long in
	// Redis past its last renewal, and is renewed every DefaultLease/3.
	DefaultLease = 30 * time.Second
	// DefaultMaxLocalHandoffs is how many times in a row a Mutex is handed
	// from one goroutine to another inside one Client before the Client
	// asks Redis whether other processes wait for it (and if so releases it
	// to them). It is also the number of fencing tokens one acquisition
	// reserves, so that those handoffs need no round trip.
	DefaultMaxLocalHandoffs = 32
	// MaxNameLen is the longest lock name accepted, in bytes.
	MaxNameLen = 4096
	// minLease keeps renewal intervals and lease arithmetic meaningful.
	minLease = 30 * time.Millisecond
)

// An Option configures a Client.
type Option func(*config)

type config struct {
	prefix   string
	lease    time.Duration
	observer Observer
	logger   *slog.Logger
	handoffs int
	name     string                        // owners' readable prefix; processName() if empty
	dial     []func(*rueidis.ClientOption) // WithDialOption (Dial only)
	test     testHooks                     // set by tests only (export_test.go)
}

// testHooks are what tests change in one Client (export_test.go sets them
// through Options), so that tests running in parallel do not race on
// package variables. Set before NewClient returns, read-only after.
type testHooks struct {
	// renewBatch bounds the holds renewed by one script call;
	// renewChunk the holds of one pipeline of a renewal round (see
	// defaultRenewBatch, defaultRenewChunk).
	renewBatch, renewChunk int
	// waitGroupObserved, when set, is called when a Wait has observed its
	// generation (the counter above zero).
	waitGroupObserved func()
	// renewReplied, when set, sees each renewal reply just after it was
	// applied: the hold it was sent for, whether it renewed, and when it
	// was sent.
	renewReplied func(h *hold, ok bool, sentAt time.Time)
}

func defaultConfig() config {
	return config{
		prefix:   DefaultKeyPrefix,
		lease:    DefaultLease,
		logger:   nil, // slog.Default() at NewClient: see WithLogger
		handoffs: DefaultMaxLocalHandoffs,
		test:     testHooks{renewBatch: defaultRenewBatch, renewChunk: defaultRenewChunk},
	}
}

func (c *config) validate() error {
	if c.prefix == "" || strings.ContainsAny(c.prefix, "{}") {
		return fmt.Errorf("%w: key prefix %q must be non-empty and free of braces", ErrInvalidArgument, c.prefix)
	}
	if c.lease < minLease {
		return fmt.Errorf("%w: lease %v is below %v", ErrInvalidArgument, c.lease, minLease)
	}
	return nil
}

// WithKeyPrefix sets the prefix of every key and channel; DefaultKeyPrefix if
// not set. Clients that should see the same locks must use the same prefix.
// The prefix must not contain '{' or '}' (they would change the hash tag).
func WithKeyPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithLease sets the watchdog lease (DefaultLease if not set or d <= 0).
// Locks acquired without WithLeaseTime live d in Redis after each renewal
// and are renewed every d/3 while held, so a crashed holder's lock frees
// itself within d.
func WithLease(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.lease = d
		}
	}
}

// WithObserver installs hooks called on lock events (see Observer). The
// otel/ package provides one that records OpenTelemetry spans and metrics.
func WithObserver(o Observer) Option { return func(c *config) { c.observer = o } }

// WithLogger sets the logger for events nobody asked about directly, such as
// a failed renewal, a lost lock or a retried Lock (whose errors have no
// other way out). Without it, or with nil, the Client logs to
// slog.Default() as it is when NewClient runs; to silence it, pass
// slog.New(slog.DiscardHandler).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithClientName names the Client: the owners it makes for calls that
// bring none read "<name>/<random>", so Inspect, the CLI and the observer's
// spans show which Client holds or waits. The default is "<host>:<pid>".
// Spaces, control characters, '/', '{' and '}' become '_', and the name is
// cut at 64 bytes.
func WithClientName(name string) Option {
	return func(c *config) { c.name = ownerName(name) }
}

// WithMaxLocalHandoffs sets how many consecutive in-process handoffs of one
// Mutex pass before the Client checks for waiters in other processes
// (DefaultMaxLocalHandoffs if not set): with some, it releases the lock to
// them; with none, it goes on handing off, at most 8n times in a row. Each
// acquisition in Redis reserves n fencing tokens, so handoffs within a block
// cost no round trip; a larger n is faster under contention inside one
// process and makes other processes wait longer for their turn. 0 disables
// handoff: every unlock goes through Redis and waiters of this process
// compete like remote ones.
func WithMaxLocalHandoffs(n int) Option {
	return func(c *config) {
		if n >= 0 {
			c.handoffs = n
		}
	}
}

// A LockOption configures one lock, semaphore or once.
type LockOption func(*lockConfig)

// lease is the lease of an acquisition under lc by a lock of c: the fixed
// lease of WithLeaseTime, or the Client's (WithLease), renewed.
func (lc *lockConfig) lease(c *Client) time.Duration {
	if lc.leaseTime > 0 {
		return lc.leaseTime
	}
	return c.cfg.lease
}

type lockConfig struct {
	leaseTime time.Duration // 0: watchdog
	resultTTL time.Duration // WithResultTTL (Group)

	// Scale-out options (replica.go, redlock.go).
	replicas       int           // WithReplicaSync: replicas that must acknowledge
	replicaTimeout time.Duration // WithReplicaSync: how long WAIT may block
	nodeTimeout    time.Duration // WithNodeTimeout: RedLock's per-node bound
}

// WithLeaseTime gives each acquisition a fixed lease of d and no watchdog:
// the lock expires d after it was acquired unless released before, and its
// lock context is then cancelled with ErrLockLost. d <= 0 keeps the watchdog.
//
// The lease runs in Redis from the moment the lock became the caller's: the
// acquire script's run, or, for a FairMutex, RWMutex or Semaphore waiter,
// the release that granted it the lock, however long after the waiter's
// last look that came. The lock context's lease clock (and its Deadline)
// starts no later than that moment on the local clock, read through the
// server time the grant and the waiter's last attempt carry, and ends
// d/100 plus a few ms early, so the caller never believes in a lease Redis
// has already ended; what is left of d is the caller's. A grant seen with
// less than half of that left (its message came late, or carried no time)
// is claimed again by one more attempt, which restarts the lease in Redis
// if the grant is still there and otherwise goes on waiting. An
// acquisition whose reply came back after its whole lease (d shorter than
// the round trip, or the process paused meanwhile) releases the lock and
// fails with ErrLockLost (Lock retries it): no acquisition returns a lock
// context that is already cancelled.
func WithLeaseTime(d time.Duration) LockOption {
	return func(c *lockConfig) {
		if d > 0 {
			c.leaseTime = max(d, time.Millisecond)
		}
	}
}

// noLockConfig is the lockConfig of no options, which the Mutexes made
// without any share (read only).
var noLockConfig lockConfig

func newLockConfig(opts []LockOption) lockConfig {
	var lc lockConfig
	for _, o := range opts {
		if o != nil {
			o(&lc)
		}
	}
	return lc
}
