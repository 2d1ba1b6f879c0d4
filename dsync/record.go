package dsync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// A runRecord is the Redis side of a result that one caller computes while
// the others wait for it: a Once, and each key of a Group. It is a state
// hash (the result, once there), a running marker "<owner> <token> <call>"
// whose lease the runner's hold keeps alive, a channel published when a run
// ends, and a set of undone calls. The primitive supplies its scripts'
// calls, each made by the script's builder in package scripts with the
// primitive's keys and arguments added:
//
//	begin  begin(owner, lease ms, call id); reply {2, val} done, {3, msg}
//	       done with an error, {1, token} run f now, {0, pttl} a run is
//	       in progress
//	end    end(mark, "ok"|"err"|"fail"|"gone", val); reply {1} recorded,
//	       {2, val} done by another run, {0} the run had lost its marker
//	undo   undo(call id, how long to remember the call as undone, ms)
//
// Renewal (once_renew_many.lua) only needs the running marker.
type runRecord struct {
	c    *Client
	name string // for errors
	info *Lock  // what events say of its runs
	lc   lockConfig

	state, run, ch string

	begin func(owner, lease, call string) scripts.Call
	end   func(mark, outcome, val string) scripts.Call
	undo  func(call, remember string) scripts.Call
}

// lease is the lease of a run.
func (r *runRecord) lease() time.Duration {
	return r.lc.lease(r.c)
}

// outcome of a wait for a record (runRecord.wait).
type recordWait struct {
	val      string    // the stored result, or the stored error message
	failed   bool      // val is the message of a stored error
	tok      uint64    // this call runs f with this token (0: it does not)
	mark     string    // the running marker of that run
	h        *hold     // that run's hold
	sentAt   time.Time // when the begin that started the run was sent
	attempts int
}

// wait waits, in the wait loop (waitLoop), until the record holds a result
// or this call may run f; then it returns the result, or the run's hold
// (not tracked yet: see runF). The end of a run is published on r.ch; the
// fallback is the running marker's remaining lease.
func (r *runRecord) wait(ctx context.Context, owner, call string) (w recordWait, err error) {
	a := recordAttempt{r: r, ctx: ctx, call: call, begin: r.begin(owner, leaseMS(r.lease()), call)}
	w.attempts, err = waitLoop(r.c, ctx, r.ch, "", false, recordProto{&a})
	w.val, w.failed, w.tok, w.sentAt = a.val, a.failed, a.tok, a.sentAt
	if err == nil && a.tok != 0 {
		w.mark = owner + " " + strconv.FormatUint(a.tok, 10) + " " + call
		w.h = r.newHold(owner, a.tok, w.mark)
	}
	return w, err
}

// recordAttempt is the state of one call's wait in Redis.
type recordAttempt struct {
	r      *runRecord
	ctx    context.Context
	call   string
	begin  scripts.Call
	sentAt time.Time
	val    string // the stored result, when done
	failed bool   // val is a stored error's message
	tok    uint64 // the run's token, when this call runs f
}

// recordProto is a record wait's waitProto.
type recordProto struct{ a *recordAttempt }

func (p recordProto) attempt(ctx context.Context, _ int) (bool, time.Duration, error) {
	a := p.a
	a.sentAt = time.Now()
	r, x := a.r, a.begin
	begin := func(ctx context.Context) ([]rueidis.RedisMessage, error) {
		return r.c.run(ctx, x).ToArray()
	}
	var res []rueidis.RedisMessage
	var err error
	if r.c.inDoubt(ctx) {
		res, err = bounded(r.c, ctx, begin) // a lost reply is undone (failed)
	} else {
		res, err = begin(ctx)
	}
	var code int64
	if err == nil && len(res) > 0 {
		code, err = res[0].AsInt64()
	}
	if err == nil && len(res) != 2 {
		err = errors.New("dsync: unexpected reply from the begin script")
	}
	if err != nil {
		return true, 0, err
	}
	switch code {
	case 2, 3:
		a.failed = code == 3
		a.val, err = res[1].ToString()
		return true, 0, err
	case 1:
		t, err := res[1].AsInt64()
		a.tok = uint64(t)
		return true, 0, err
	}
	pttl, _ := res[1].AsInt64()
	return false, time.Duration(max(pttl, 1)) * time.Millisecond, nil // at 0 the marker expires now: look again soon
}

// failed undoes this call exactly: a lost reply may hide a started run (a
// begin still on its way then does nothing). In the background, so the
// call returns by its deadline. (A look whose context ended before it is
// not sent: waitLoop checks, so no undo is needed for it.)
func (p recordProto) failed(error) {
	r, call := p.a.r, p.a.call
	r.c.background(func(bctx context.Context) { r.undoCall(bctx, call) })
}

func (p recordProto) waiting() {
	a := p.a
	a.r.c.blocked(a.ctx, *a.r.info, a.r.state)
}

func (recordProto) gaveUp() {}

func (recordProto) granted(uint64, uint64) bool { return false } // no grants: it looks again

// undoCall takes back the call named call: its run, if its begin started
// one, and any begin of it still on its way.
func (r *runRecord) undoCall(ctx context.Context, call string) {
	x := r.undo(call, leaseMS(r.c.cfg.lease))
	_ = idempotent(ctx, func(ctx context.Context) error {
		return r.c.run(ctx, x).Error()
	})
}

// newHold makes the hold of a run whose running marker is mark ("<owner>
// <token> <call>"): its lease is the marker's.
func (r *runRecord) newHold(owner string, tok uint64, mark string) *hold {
	h := r.c.newHold(r.info, owner, tok)
	h.key = r.state
	h.watchdog = r.lc.leaseTime == 0
	h.ops = &runHold{r: r, mark: mark}
	return h
}

// runHold is the holdOps of a run: its running marker.
type runHold struct {
	r    *runRecord
	mark string
}

func (rh *runHold) renewKey(*hold) (string, string, bool) { return "", "", false }

func (rh *runHold) renewIn(*hold) (*rueidis.Lua, []string, []string) {
	return scripts.OnceRenewMany, []string{rh.r.run}, scripts.AppendOnceRenewManyArgs(nil, rh.mark)
}

// releaseExec ends the run as failed (Close: f's outcome is unknown).
func (rh *runHold) releaseExec(*hold) (*rueidis.Lua, rueidis.LuaExec) {
	x := rh.r.end(rh.mark, rh.r.closeEnd(), "")
	return x.Script, x.LuaExec
}

// closeEnd is the outcome of a run its Client's Close ended: failed, and
// for a Group the caller does not wait on (see group_end.lua).
func (r *runRecord) closeEnd() string {
	if r.info.Kind == KindGroup {
		return "gone"
	}
	return "fail"
}

func (rh *runHold) ended(*hold, bool) {}

// claim starts the lease clock of the run the wait w was given (w.h),
// while the call is still one that Close waits for (between enter and
// exit): then either the hold is the Client's, and Close releases it, or
// Close has begun, and the run ends here as Close would end it, before
// Close returns. (Started after exit, it could end after Close returned,
// on a Redis client closed meanwhile, and leave its marker a lease.)
func (r *runRecord) claim(ctx context.Context, w recordWait) bool {
	if w.h.track(w.sentAt, r.lease()) {
		return true
	}
	_, _ = r.endRun(ctx, w.mark, r.closeEnd(), "")
	// Ended as Close ends it: its tag (the observer's, written when the
	// wait ended) goes too.
	w.h.end(ErrClosed, false)
	return false
}

// runEnd is what runF reports: f's result and error, and how the end
// script took it (code and stored value, see runRecord) or why it could
// not.
type runEnd struct {
	val    string
	err    error
	code   int64
	stored string
	endErr error
}

// runF runs f under the run's hold w.h (marker w.mark, claimed) and records the
// outcome: "ok" with f's result, or what outcome says of f's error
// ("fail": the next caller runs f; "err": the message is the result).
// runKey marks the context f gets (see onceRunKey). If f panics, the run
// ends as failed and the panic goes on.
func (r *runRecord) runF(ctx context.Context, w recordWait, runKey any,
	f func(context.Context) (string, error), outcome func(error) (string, string)) (e runEnd) {
	h := w.h
	lctx := h.newCtx(context.WithValue(ctx, runKey, true))
	released := func(err error) {
		h.end(errReleased, false)
		if f := r.c.cfg.observer.Released; f != nil {
			f(ctx, Released{Lock: *h.lock, Hold: h.id, Held: h.held(), Err: err, Complete: true})
		}
	}
	ok := false
	defer func() {
		if !ok {
			// f panicked: give the next caller its turn; the panic goes on.
			h.beginRelease()
			_, err := r.endRun(context.WithoutCancel(ctx), w.mark, "fail", "")
			released(err)
		}
	}()
	if cause := h.lossCause(); cause != nil {
		// The run was lost before f could start: its lease clock had
		// run out (the begin's reply, or this goroutine, came later
		// than the lease: a paused or starved process, or a lease
		// shorter than the round trip), or a renewal found it gone.
		// Another run may have begun since, and succeeded: f must not
		// run. The run ends as failed, this call waiting on no longer
		// (closeEnd); the end's reply says whether a run has succeeded
		// (code 2, a Once's), else the caller is told why.
		ok = true
		h.beginRelease()
		res, err := r.endRun(context.WithoutCancel(ctx), w.mark, r.closeEnd(), "")
		released(err)
		if err == nil && len(res) > 1 {
			if code, _ := res[0].AsInt64(); code == 2 {
				e.code = 2
				e.stored, _ = res[1].ToString()
				return e
			}
		}
		e.err = fmt.Errorf("%w (before the function could start: it was not run)", cause)
		return e
	}
	e.val, e.err = f(lctx)
	ok = true
	kind, msg := "ok", e.val
	if e.err != nil {
		kind, msg = outcome(e.err)
		if errors.Is(context.Cause(lctx), ErrClosed) {
			// The Client closed under f: an end of this caller's own, as
			// if its process had died; the next caller runs f.
			kind, msg = r.closeEnd(), ""
		}
	}
	// The hold ends after the outcome is recorded, so a lease lost during
	// f still shows in its context. f has run: its outcome is recorded
	// whatever ctx says now (within cleanupTimeout), so that a run that
	// succeeded is not run again because its caller's deadline passed
	// while f ran.
	h.beginRelease()
	res, err := r.endRun(context.WithoutCancel(ctx), w.mark, kind, msg)
	if err == nil {
		e.code, _ = res[0].AsInt64()
		if e.code == 2 && len(res) > 1 {
			e.stored, _ = res[1].ToString()
		}
		if why := r.superseded(e.code); why != "" {
			// The run's lease lapsed before its end reached Redis, unseen
			// here, and another run began meanwhile: f's context says so.
			h.end(h.lostCause(why), true)
		}
	}
	released(err)
	if err != nil {
		e.endErr = err
	}
	return e
}

// superseded says why a run whose end script replied code was lost, or ""
// if it was not: a Once's end finds that another run began after this
// one's lease lapsed (once_end.lua). A Group's end does not tell a lapsed
// lease from a Forget.
func (r *runRecord) superseded(code int64) string {
	if r.info.Kind != KindOnce {
		return ""
	}
	switch code {
	case 0:
		return "its lease lapsed before its result reached Redis, and another run began meanwhile: this run's outcome was discarded"
	case 2:
		return "its lease lapsed before its result reached Redis, and another run began meanwhile and succeeded: Do returns that run's result"
	}
	return ""
}

// endRun records a run's outcome, retrying a lost reply as every release
// is (idempotent: the script is, for one marker), under a context that
// outlives ctx.
func (r *runRecord) endRun(ctx context.Context, marker, outcome, val string) ([]rueidis.RedisMessage, error) {
	x := r.end(marker, outcome, val)
	var res []rueidis.RedisMessage
	err := idempotent(ctx, func(ctx context.Context) (err error) {
		res, err = r.c.run(ctx, x).ToArray()
		return err
	})
	if err == nil && len(res) == 0 {
		err = errors.New("dsync: unexpected reply from the end script")
	}
	return res, err
}
