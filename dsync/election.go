package dsync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/dsync/dsync/internal/scripts"
)

// KindElection names an Election in events, Inspect and List. An Election's
// acquisition is a campaign, its hold a term.
const KindElection Kind = "election"

// MaxLeaderValueLen is the longest value a leader may proclaim, in bytes.
const MaxLeaderValueLen = 64 << 10

// A Leader is the leader of an Election, as its record says.
type Leader struct {
	Value string    // as proclaimed
	Owner string    // the leader's owner ID
	Term  uint64    // the fencing token of its leadership
	Since time.Time // server time the term began
}

// An Election elects one leader per name across every Client and process
// using the same key prefix and name, as etcd's concurrency.Election does.
// Candidates are served in arrival order. The term is a fencing token, so a
// store can reject a deposed leader. A leader that dies is replaced within
// one lease; Client.Close resigns.
//
// An Election is safe for concurrent use. Its zero value is not usable;
// create Elections with Client.NewElection. An Election may be copied only
// before first use.
type Election struct {
	c    *Client
	name string
	err  error // a bad name, returned by every call
	fm   *FairMutex

	keys     []string // scripts.ElectionKeys: the lock, the leader record
	ch       string   // where every change is published
	ttl      string   // the record's lifetime in ms: two leases
	watchdog bool     // terms are renewed, so is the record (see keep)
}

// electionLockName is the name of the FairMutex an Election called name
// queues on. FairMutex keys are "<prefix>:{<name>}:fair..."; an Election
// needs its own, and NewFairMutex gives no say in the kind part, so the
// election's lock gets a name no one is likely to give a FairMutex (a NUL
// byte first). A name too long for that prefix is hashed instead (the
// marker "#" cannot follow "election:" for a short one). The record and
// the channel are built on the same name, so every key of an election
// shares one hash tag.
func electionLockName(name string) string {
	const tag = "\x00election:"
	if len(name)+len(tag) <= MaxNameLen {
		return tag + name
	}
	sum := sha256.Sum256([]byte(name))
	return "\x00election#" + hex.EncodeToString(sum[:])
}

// NewElection returns the election called name. An invalid name makes every
// call fail with ErrInvalidArgument. The options are those of a FairMutex:
// WithLeaseTime gives every term a fixed lease. No FairMutex should be named
// "\x00election:" followed by name.
func (c *Client) NewElection(name string, opts ...LockOption) *Election {
	ln := electionLockName(name)
	fm := c.NewFairMutex(ln, opts...)
	// Events and errors name the election, not its lock.
	fm.q.info = Lock{Kind: KindElection, Name: name, N: 1}
	lc := newLockConfig(opts)
	lease := lc.lease(c)
	base := c.lockKey("election", ln)
	e := &Election{
		c:        c,
		name:     name,
		err:      checkName(name),
		fm:       fm,
		keys:     scripts.ElectionKeys(fm.q.base, base),
		ch:       base + ":ch",
		ttl:      leaseMS(2 * lease),
		watchdog: lc.leaseTime == 0,
	}
	// Close ends a term as Resign does: the end is recorded and
	// published before the lock's release (a hold whose term has not
	// begun yet records nothing: see election_resign.lua).
	fm.q.p = &electionProto{fairProto: fm.q.p.(*fairProto), e: e}
	return e
}

// electionProto is the qproto of an Election's lock: a FairMutex's, and at
// Close the end of the term, recorded and published as Resign does.
type electionProto struct {
	*fairProto
	e *Election
}

func (p *electionProto) closing(h *hold) (scripts.Call, bool) {
	return p.e.resignCall(h.owner, h.token), true
}

// resignCall is election_resign.lua's call for the term of owner: Resign's,
// Close's (closing) and ForceUnlock's (forceElection).
func (e *Election) resignCall(owner string, term uint64) scripts.Call {
	return scripts.ElectionResignCall(e.keys, owner, term, e.ttl, e.ch)
}

func checkValue(v string) error {
	if len(v) > MaxLeaderValueLen {
		return fmt.Errorf("%w: value of %d bytes exceeds MaxLeaderValueLen (%d)", ErrInvalidArgument, len(v), MaxLeaderValueLen)
	}
	return nil
}

// Campaign waits in line until the owner ctx carries (a fresh one if none)
// leads the election, or ctx is done, and then proclaims value. It returns
// the leadership context: a lock context whose FencingToken is the term,
// cancelled when the term ends (Resign, a lost lease, Close), not when ctx
// does. Campaign by an owner that already leads returns ErrInvalidArgument:
// use Proclaim.
func (e *Election) Campaign(ctx context.Context, value string) (context.Context, error) {
	c := e.c
	if err := c.checkCall(ctx, e.err); err != nil {
		return nil, wrapErr(KindElection, e.name, err)
	}
	if err := c.enter(); err != nil {
		return nil, err
	}
	defer c.exit()
	if err := checkValue(value); err != nil {
		return nil, err
	}
	// ctx bounds the wait, not the term (as in etcd): the lock is taken
	// under a context with ctx's values (owner, trace) whose cancellation
	// follows ctx only until the lock is granted, so that the leadership
	// context is cancelled when the term ends, and only then. A ctx that
	// cannot be cancelled (context.Background()) is taken as it is: a
	// stand-in that can be would move the Client's connection to rueidis'
	// pipelining goroutines (directCtx).
	wctx, stop := ctx, func() bool { return true }
	if ctx.Done() != nil {
		var cancel context.CancelCauseFunc
		wctx, cancel = context.WithCancelCause(context.WithoutCancel(ctx))
		stop = context.AfterFunc(ctx, func() { cancel(ctx.Err()) })
	}
	lctx, err := e.fm.LockContext(wctx)
	if !stop() && ctx.Err() != nil {
		// ctx ended during the wait: its error, not the stand-in's.
		if err == nil {
			_ = e.fm.UnlockContext(lctx)
		}
		return nil, wrapErr(KindElection, e.name, ctx.Err())
	}
	if err != nil {
		return nil, renameErr(KindElection, e.name, err)
	}
	owner, _ := OwnerOf(lctx)
	term, _ := FencingToken(lctx)
	code, err := c.run(ctx, scripts.ElectionBeginCall(e.keys, owner, term, value, e.ttl, e.ch)).AsInt64()
	switch {
	case err != nil:
		// The term may have begun with its reply lost: end it as Resign
		// would, whatever ctx says now.
		_ = e.resign(lctx, owner, term)
		return nil, wrapErr(KindElection, e.name, err)
	case code == 2:
		// The lock re-entered a term of this owner: take that back.
		_ = e.fm.UnlockContext(lctx)
		return nil, fmt.Errorf("%w: the owner already leads election %q", ErrInvalidArgument, shortName(e.name))
	case code == 0:
		// Lost between the grant and the record (a lease shorter than a
		// round trip): nothing to resign.
		_ = e.fm.UnlockContext(lctx)
		return nil, fmt.Errorf("dsync: election %q: %w", shortName(e.name), ErrLockLost)
	}
	e.keep(lctx, owner, term)
	return lctx, nil
}

// leadership returns the owner and term lctx leads with, ErrNotHeld if it
// carries none or its leadership has ended, or lctx's own error.
func (e *Election) leadership(lctx context.Context) (string, uint64, error) {
	owner, ok := OwnerOf(lctx)
	term, ok2 := FencingToken(lctx)
	if !ok || !ok2 {
		return "", 0, ErrNotHeld
	}
	if lctx.Err() != nil {
		cause := context.Cause(lctx)
		switch {
		case errors.Is(cause, ErrClosed):
			return "", 0, ErrClosed
		case errors.Is(cause, ErrLockLost), errors.Is(cause, errReleased):
			return "", 0, fmt.Errorf("%w: %w", ErrNotHeld, cause)
		}
		return "", 0, lctx.Err()
	}
	return owner, term, nil
}

// Proclaim changes the leader's value without ending the term: lctx is the
// leadership context. It returns ErrNotHeld if lctx does not lead the
// election. Proclaiming the current value tells no observer.
func (e *Election) Proclaim(lctx context.Context, value string) error {
	if lctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	c := e.c
	if e.err != nil {
		return e.err
	}
	if err := c.checkOpen(); err != nil {
		return err
	}
	if err := checkValue(value); err != nil {
		return err
	}
	owner, term, err := e.leadership(lctx)
	if err != nil {
		return err
	}
	if err := c.otherClient(lctx, KindElection, e.name, "Proclaim"); err != nil {
		return err
	}
	x := scripts.ElectionProclaimCall(e.keys, owner, term, value, e.ttl, e.ch)
	// Under lctx's values but not its cancellation when it has no deadline
	// (directCtx): a term that ends during the call is told by the script.
	code, err := c.run(directCtx(lctx), x).AsInt64()
	if err == nil && code == 0 {
		err = ErrNotHeld
	}
	return wrapErr(KindElection, e.name, err)
}

// Resign ends the leadership of lctx, even if lctx is cancelled, and the
// next candidate takes over. It returns ErrNotHeld if lctx does not lead the
// election. If Redis cannot be reached the leadership may go on (its context
// says whether): call Resign again.
func (e *Election) Resign(lctx context.Context) error {
	if lctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if e.err != nil {
		return e.err
	}
	if err := e.c.enter(); err != nil {
		return err
	}
	defer e.c.exit()
	owner, ok := OwnerOf(lctx)
	term, ok2 := FencingToken(lctx)
	if !ok || !ok2 {
		return notHeld(lctx, KindElection, e.name, "Campaign", false)
	}
	if err := e.c.otherClient(lctx, KindElection, e.name, "Resign"); err != nil {
		return err
	}
	return releaseErr(lctx, wrapErr(KindElection, e.name, e.resign(lctx, owner, term)))
}

// resign records the end of term and releases its lock, under a context
// that ignores lctx's cancellation. Only the lock of that very term is
// released: a context of the same owner from another lock must not end it.
func (e *Election) resign(lctx context.Context, owner string, term uint64) error {
	c := e.c
	rctx := directCtx(releaseCtx(lctx))
	x := e.resignCall(owner, term)
	var code int64
	err := idempotent(rctx, func(ctx context.Context) error {
		var err error
		code, err = c.run(ctx, x).AsInt64()
		return err
	})
	if err != nil {
		return err
	}
	if code == 0 {
		return ErrNotHeld
	}
	return e.fm.UnlockContext(rctx)
}

// keep has the Client's renewer keep the record of a term, every lease/3
// while the term's hold lives, with the holds it renews: the renewer
// renews the lock alone, and the record must outlive it (by a lease) so
// that the next term finds the last one and records its end before its own
// start. A term with a fixed lease needs nothing: its record lives twice
// that lease.
func (e *Election) keep(lctx context.Context, owner string, term uint64) {
	lc, ok := lctx.(*lockCtx)
	if !e.watchdog || !ok {
		return
	}
	c := e.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.terms == nil {
		c.terms = map[*hold]termRecord{}
	}
	c.terms[lc.h] = termRecord{keys: e.keys, args: scripts.AppendElectionTouchManyArgs(nil, owner, term, e.ttl)}
}

// A termRecord is what the renewer needs to keep an Election term's record
// (election_touch_many.lua): the election's keys, and the term's arguments
// in a batch (scripts.AppendElectionTouchManyArgs).
type termRecord struct{ keys, args []string }

// Leader returns the current leader, or ErrNoLeader when there is none.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if err := e.c.checkCall(ctx, e.err); err != nil {
		return Leader{}, err
	}
	st, err := e.read(ctx, 0)
	if err != nil {
		return Leader{}, err
	}
	if l := st.current(); l.Term != 0 {
		return l, nil
	}
	return Leader{}, ErrNoLeader
}
