package dsync

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// A forced release (ForceUnlock, "dsync unlock --force") tells the holders
// at once: it publishes the lock's name on the control channel of the key
// prefix (see forceChannel), which every Client subscribes to for its whole
// life on the connection its wakeups use (a sharded subscription in a
// Redis 7 cluster). A Client that holds a lock of that name checks its
// holds in Redis at once, as a renewal would, and those found gone end as
// lost: their lock contexts are cancelled with ErrLockLost within a round
// trip of the forced release, not at the next renewal. An acquisition
// pays nothing for this: the subscription is the Client's, made once.
//
// The message is "<reply> <name>": reply is "-", or a list key on which
// each Client that received it pushes one answer, "<client>" followed by a
// line "<kind> <owner> <name>[ locker]" for each hold it ended, "locker"
// for a hold Lock or TryLock took (ForceUnlockTell).

// forceAnswerWait bounds how long ForceUnlockTell waits for the Clients'
// answers.
const forceAnswerWait = time.Second

// A ToldHolder is a holder that a forced release reached at once: its
// Client found its hold gone and cancelled its lock context (or, with
// Locker, only logged the loss).
type ToldHolder struct {
	Kind  Kind
	Name  string
	Owner string
	// Client names the holder's Client: "<name>/<id>", the name being
	// WithClientName's (the process's name by default).
	Client string
	// Locker: the hold was taken by Lock or TryLock, which return no lock
	// context: nothing stops the holder's work; its Client logged the loss.
	Locker bool
}

// holdCheck asks the renewal loop to check holds in Redis now.
type holdCheck struct {
	holds []*hold
	why   string // why those found gone are lost (whyForced, whyMissed)
	done  chan struct{}
}

// forceChannel is the control channel of the Client's key prefix,
// "<prefix>:force": under the prefix, so that a Redis user restricted to
// the prefix's channels (ACL &<prefix>:*) may subscribe to it; no lock's
// channel ("<prefix>:{<name>}:...") is named so.
func (c *Client) forceChannel() string { return c.cfg.prefix + ":force" }

// checkHolds has the renewal loop check holds in Redis now (those found
// gone end as lost for the reason why) and reports whether it did before
// ctx ended.
func (c *Client) checkHolds(ctx context.Context, holds []*hold, why string) bool {
	hc := holdCheck{holds: holds, why: why, done: make(chan struct{})}
	select {
	case c.renew.checks <- hc:
	case <-ctx.Done():
		return false
	case <-c.done:
		return false
	}
	select {
	case <-hc.done:
		return true
	case <-ctx.Done():
		return false
	}
}

// controlLive runs when the control channel's subscription is confirmed,
// first or again after a break: a notice published while it was not (a
// forced release, a release by owner through another Client) reached no
// one here, so every hold of the Client is checked in Redis now, as a
// notice would have had it checked.
//
// A forced release told while that check runs may find the hold already
// ended by it: ForceUnlockTell then does not name that holder.
//
// The caller has counted the check in catchingUp in the same critical
// section that marked the subscription live, so that no one sees it live
// with the check not yet counted (ForceSubscribed, for tests that delete
// a key and must know the check is behind them).
func (c *Client) controlLive() {
	if !c.background(func(ctx context.Context) {
		defer c.catchingUp.Add(-1)
		var holds []*hold
		c.clock.each(func(h *hold) { holds = append(holds, h) })
		if len(holds) > 0 {
			c.checkHolds(ctx, holds, whyMissed)
		}
	}) {
		c.catchingUp.Add(-1)
	}
}

// tellForced publishes the forced release of the locks called name on the
// control channel and reports how many Clients received it (in a cluster
// without sharded pub/sub, those connected to the node that took it only).
func (c *Client) tellForced(ctx context.Context, name, reply string) (int64, error) {
	// Told even if ctx ended after the release: the holders must learn.
	ctx, cancel := cleanupCtx(releaseCtx(ctx))
	defer cancel()
	ch, msg := c.forceChannel(), reply+" "+name
	if c.sharded {
		return c.rc.Do(ctx, c.rc.B().Spublish().Channel(ch).Message(msg).Build()).AsInt64()
	}
	return c.rc.Do(ctx, c.rc.B().Publish().Channel(ch).Message(msg).Build()).AsInt64()
}

// tellReleasedByOwner tells the holders of the locks called name that one
// was released by its owner through this Client, which did not hold it
// (a WithOwner context passed to another Client): the holding Client
// checks its holds in Redis at once, as after a forced release, so the
// lock context of the hold that is gone ends now, not at its next renewal.
// A failure to tell leaves that to the renewal, as before.
func (c *Client) tellReleasedByOwner(ctx context.Context, name string) {
	_, _ = c.tellForced(ctx, name, "-")
}

// onForce handles a message on the control channel (on rueidis' reader:
// it must not block).
func (c *Client) onForce(msg string) {
	reply, name, ok := strings.Cut(msg, " ")
	if !ok {
		return
	}
	c.background(func(ctx context.Context) { c.forced(ctx, reply, name) })
}

// forced checks in Redis every hold of the Client of a lock called name
// (an Election's too), so that those a forced release ended are lost now,
// and answers on reply.
func (c *Client) forced(ctx context.Context, reply, name string) {
	var holds []*hold
	election := ""
	if !isElectionLock(name) {
		election = electionLockName(name)
	}
	c.clock.each(func(h *hold) {
		if n := h.lock.Name; n == name || n == election {
			holds = append(holds, h)
		}
	})
	var ended []*hold
	if len(holds) > 0 {
		if !c.checkHolds(ctx, holds, whyForced) {
			return
		}
		for _, h := range holds {
			if h.isEnded() {
				ended = append(ended, h)
			}
		}
	}
	if reply == "-" {
		return
	}
	var b strings.Builder
	b.WriteString(c.ident)
	for _, h := range ended {
		kind, n := h.lock.Kind, name
		if isElectionLock(h.lock.Name) {
			kind = KindElection
		}
		b.WriteString("\n" + string(kind) + " " + strconv.Quote(h.owner) + " " + strconv.Quote(n))
		if h.byLocker.Load() {
			b.WriteString(" locker")
		}
	}
	cmds := c.rc.B()
	for _, r := range c.rc.DoMulti(ctx,
		cmds.Rpush().Key(reply).Element(b.String()).Build(),
		cmds.Pexpire().Key(reply).Milliseconds(int64(10*forceAnswerWait/time.Millisecond)).Build()) {
		if err := r.Error(); err != nil {
			c.cfg.logger.Debug("dsync: answering a forced release failed", "err", err)
		}
	}
}

// check checks holds in Redis now (on the renewal loop's goroutine): those
// with a watchdog by renewing them, those with a fixed lease and the
// mutex's layout by reading their key (a renewal would change the lease).
// Those found gone end as lost for the reason why, unless a release of
// theirs is on its way.
func (r *renewer) check(holds []*hold, why string) {
	c := r.c
	var watched []*hold
	for _, h := range holds {
		if h.watchdog {
			watched = append(watched, h)
			continue
		}
		key, value, ok := h.ops.renewKey(h)
		if !ok || h.lock.Kind == KindElection || isElectionLock(h.lock.Name) {
			// Ends with its lease. (An Election term's lock has the
			// mutex's layout, but ForceUnlock's doc promises only Mutex
			// and FairMutex holds with a fixed lease to be told.)
			continue
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.cfg.lease/2)
		v, err := c.rc.Do(ctx, c.rc.B().Get().Key(key).Build()).ToString()
		cancel()
		// (The hold's value prefix: its renewal value less the count.)
		if (err == nil || rueidis.IsRedisNil(err)) && !strings.HasPrefix(v, value[:len(value)-1]) {
			h.renewReply(false, time.Time{}, 0, why)
		}
	}
	if len(watched) > 0 {
		var fl *flight
		if c.sessionsOn() {
			fl = r.takeOff()
		}
		_, _ = r.send(r.calls(watched, nil), why, fl)
	}
}
