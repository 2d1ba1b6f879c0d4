package dsync

import (
	"context"
	"time"
)

// Kind names a primitive in events and in Inspect.
type Kind string

// The primitives.
const (
	KindMutex     Kind = "mutex"
	KindFairMutex Kind = "fair_mutex"
	KindRWMutex   Kind = "rw_mutex"
	KindSemaphore Kind = "semaphore"
	KindOnce      Kind = "once"
	KindWaitGroup Kind = "wait_group"
	// A Group run is a hold.
	KindGroup Kind = "group"
	// A Cond's Wait for a signal is an acquisition, never Acquired.
	KindCond Kind = "cond"
)

// Observer receives lock events, in the manner of httptrace.ClientTrace: any
// hook may be nil, and a nil hook costs nothing. Hooks are called
// synchronously on the goroutine of the event and must not block. The otel/
// package builds one that records spans and metrics.
type Observer struct {
	// AcquireStart is called when an acquisition starts. The context it
	// returns (nil means unchanged) is the one AcquireDone receives, so a
	// tracer can start a span here and end it there.
	AcquireStart func(ctx context.Context, e AcquireStart) context.Context
	// AcquireDone is called when an acquisition ends, held or not.
	AcquireDone func(ctx context.Context, e AcquireDone)
	// Released is called when a hold ends by release.
	Released func(ctx context.Context, e Released)
	// RenewFailed is called when a renewal round could not reach Redis; the
	// hold is not lost yet, and is retried.
	RenewFailed func(e RenewFailed)
	// Lost is called when a hold is lost: its lease ran out unrenewed or its
	// key was gone.
	Lost func(e Lost)
	// HoldTag, when set, is called after AcquireDone for every new hold
	// (not for re-entries). A non-empty string it returns (at most 512
	// bytes) tags the hold: every acquisition of the same lock, in any
	// process, that waited while the hold held the lock receives the tag
	// in AcquireDone.Blockers, with how much of its wait the hold
	// accounts for (its own Client's holds, the Mutex's local queue
	// included, other Clients', other processes'; see Blocker). The otel/
	// package returns the hold span's context, so that a waiter's span
	// links to the span of each holder it waited behind. A current hold's
	// tag ends with its hold (a dead holder's within a lease); the lock's
	// history of ended holds in Redis (64, each a minute at most) outlives
	// Close. Without HoldTag none of it runs; otel/doc.go says what it
	// costs.
	HoldTag func(ctx context.Context, e AcquireDone) string
}

// Lock identifies the lock an event is about.
type Lock struct {
	Kind Kind
	Name string
	// Mode is "read" or "write" for an RWMutex, "" otherwise.
	Mode string
	// N is the number of permits for a Semaphore, 1 otherwise.
	N int64
}

// AcquireStart describes an acquisition that begins.
type AcquireStart struct {
	Lock
	Try bool // TryLock-style: one attempt, no waiting
}

// AcquireDone describes an acquisition that ended.
type AcquireDone struct {
	Lock
	Try       bool
	Acquired  bool          // the lock is held
	Reentered bool          // the owner already held it; only the count grew
	Err       error         // why it was not acquired (nil when Try found it held)
	Wait      time.Duration // from the call to the end
	Attempts  int           // acquisition scripts sent to Redis
	// Queued: it waited in its own Client behind another goroutine of
	// that Client (a Mutex's waiters queue in their process, where one
	// holds or tries the lock for all of them). For a Mutex, Attempts <=
	// 1 with Queued and Granted false means nothing held it up: its one
	// script, if any, found the lock free, whatever held it before. Always
	// false for the other kinds, whose waiters queue in Redis (one
	// attempt, then a grant by message, is a wait there).
	Queued bool
	// Granted: a Mutex acquisition that a release of another Client
	// granted it in Redis (docs/design.md): after its one attempt found
	// the lock held, it waited for that holder. Always false for the
	// other kinds (see Queued).
	Granted bool
	Token   uint64 // fencing token, when acquired
	Hold    uint64 // identifies the hold in Released and Lost
	// HeldSince is when the hold began, when acquired (zero otherwise):
	// when the acquisition's reply arrived, or, for a Mutex handed on
	// inside its Client, when the holder before it handed it over, which
	// may be before this acquisition's goroutine has run again. For a
	// re-entry, when the hold it re-entered began.
	HeldSince time.Time
	Owner     string // the owner that acquired or waited ("<name>/<random>", see WithOwner)
	// BlockedBy are the tags of Blockers, in the same order.
	BlockedBy []string
	// Blockers are the tagged holds (see Observer.HoldTag) that held the
	// lock while the acquisition waited, in the order they began: in its
	// own Client, in other Clients, in other processes. Set whether or
	// not the wait ended with the lock; empty unless HoldTag is set, and
	// for an acquisition that did not wait.
	Blockers []Blocker
	// BlockersDropped counts the blockers beyond MaxBlockers that were
	// left out: those that held the lock for the least of the wait.
	BlockersDropped int
}

// A Blocker is a hold that held a lock while an acquisition waited for
// it.
type Blocker struct {
	Tag   string    // the hold's tag (Observer.HoldTag)
	Start time.Time // when the hold began, on its Client's clock
	// End is when it ended, on its Client's clock; zero if it was still
	// held when the wait ended.
	End time.Time
	// Overlap is how much of the wait it held the lock: from the later of
	// its start and the wait's to the earlier of their ends.
	Overlap time.Duration
}

// Released describes the end of a hold by release.
type Released struct {
	Lock
	Hold     uint64
	Held     time.Duration
	Err      error
	Complete bool // false when only a re-entry count was released
}

// RenewFailed describes a renewal round that failed.
type RenewFailed struct {
	Err   error
	Holds int // holds the round was renewing
	// HoldIDs identifies those holds (as AcquireDone.Hold does), so an
	// observer can tell which holds are at risk.
	HoldIDs []uint64
}

// Lost describes a hold that was lost.
type Lost struct {
	Lock
	Hold  uint64
	Held  time.Duration
	Cause error
}
