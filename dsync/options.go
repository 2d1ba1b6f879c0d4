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
	// DefaultLease is the watchdog lease (see WithLease).
	DefaultLease = 30 * time.Second
	// DefaultMaxLocalHandoffs: see WithMaxLocalHandoffs.
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
	// sessionEvery is how many rounds apart a hold bound to the Client's
	// renewal session is written (defaultSessionEvery); 0: no session.
	sessionEvery int
	// waitGroupObserved, when set, is called when a Wait has observed its
	// generation (the counter above zero).
	waitGroupObserved func()
	// renewReplied, when set, sees each renewal reply just after it was
	// applied: the hold it was sent for, whether it renewed, and when it
	// was sent.
	renewReplied func(h *hold, ok bool, sentAt time.Time)
	// fallbackPolled, when set, is called when a wait subscribed to its
	// channel was woken by its fallback timer (lease/3 or the hint), not
	// by a message or a reconnect: where no hint applies, the signature of
	// a lost wakeup. d is what the timer was set for.
	fallbackPolled func(ch string, d time.Duration)
	// waitParked, when set, is called with true when a wait subscribed to
	// its channel blocks until a message, a reconnect or its fallback
	// timer (its last look answered: none of its looks is in flight), and
	// with false when it stops blocking.
	waitParked func(ch string, parked bool)
	// mutexEvent, when set, sees a Mutex's steps between its holders in
	// this Client (Client.testEvent).
	mutexEvent func(event string)
	// yieldWait, when set, replaces yieldWait.
	yieldWait time.Duration
	// semReleaseReplied, when set, runs when a Semaphore's release script
	// has replied, before the holds it released end here.
	semReleaseReplied func()
	// releaseAwaits, when set, runs when a Mutex release is about to wait
	// for a renewal round's session batches in flight (Mutex.afterRenewal).
	releaseAwaits func()
	// sessionSending, when set, runs before a renewal pipeline with a
	// session batch (MutexRenewSession) is sent.
	sessionSending func()
}

func defaultConfig() config {
	return config{
		prefix:   DefaultKeyPrefix,
		lease:    DefaultLease,
		logger:   nil, // slog.Default() at NewClient: see WithLogger
		handoffs: DefaultMaxLocalHandoffs,
		test:     testHooks{renewBatch: defaultRenewBatch, renewChunk: defaultRenewChunk, sessionEvery: defaultSessionEvery},
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

// WithKeyPrefix sets the prefix of every key and channel (DefaultKeyPrefix
// if not set). Clients that share locks must share the prefix. A prefix with
// '{' or '}' makes NewClient fail.
func WithKeyPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithLease sets the watchdog lease (DefaultLease if d <= 0): a held lock
// lives d in Redis after each renewal, and is renewed every d/3, so a
// crashed holder's lock frees itself within d.
func WithLease(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.lease = d
		}
	}
}

// WithObserver installs hooks called on lock events (see Observer). Package
// dsyncotel (the otel/ module) provides one that records spans and metrics.
func WithObserver(o Observer) Option { return func(c *config) { c.observer = o } }

// WithLogger sets the logger for what no caller is told, such as a lost lock
// or a retried Lock (default: slog.Default() at NewClient).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithClientName names the Client in the owners it makes
// ("<name>/<random>"), so Inspect, the CLI and spans show which Client holds
// or waits. The default is "<host>:<pid>".
func WithClientName(name string) Option {
	return func(c *config) { c.name = ownerName(name) }
}

// WithMaxLocalHandoffs sets how many consecutive handoffs of one Mutex
// between goroutines of the Client, without Redis, pass before the lock goes
// to waiters in other processes (DefaultMaxLocalHandoffs if not set; 0:
// none). A larger n is faster within a process and makes others wait longer.
func WithMaxLocalHandoffs(n int) Option {
	return func(c *config) {
		if n >= 0 {
			c.handoffs = n
		}
	}
}

// A LockOption configures one lock.
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

// WithLeaseTime gives each acquisition a fixed lease of d and no renewal:
// the lock expires d after Redis granted it unless released before. Its lock
// context ends a little early (d/100 plus a few ms), with ErrLockLost, so
// the caller never believes in a lease Redis has ended; no acquisition
// returns one already ended. Client.Close releases such a hold at once,
// as any other, rather than leave it to its lease. d <= 0 keeps the
// watchdog.
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
