package dsync

import (
	"context"
	"time"
)

// maxObservePending bounds the changes an observer keeps for a reader that
// does not keep up; past it the oldest are dropped (coalesced into the
// later ones), never the last, so the reader always ends on the current
// state.
const maxObservePending = 16

// Observe returns a channel that delivers the election's leader now and then
// every change, in order: a new leader, a new value, no leader (Leader{}). A
// slow reader misses intermediate states only: the last delivered is the
// current one. The channel is closed when ctx ends, the Client closes, or
// Redis refuses the election's read for good (logged).
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader)
	c := e.c
	if ctx == nil || e.err != nil || c.checkOpen() != nil || ctx.Err() != nil {
		close(out)
		return out
	}
	if !c.spawn(&c.loops, func() {
		defer close(out)
		e.observe(ctx, out)
	}) {
		close(out)
	}
	return out
}

// An observer is the state of one Observe: what it has read and what the
// reader has yet to receive.
type observer struct {
	seen    uint64   // the version of the last change read
	last    Leader   // the last state queued (or delivered)
	started bool     // something was queued
	pending []Leader // queued for the reader, oldest first
}

// push queues l unless it is the state the reader already has or will have.
func (o *observer) push(l Leader) {
	if o.started && sameLeader(o.last, l) {
		return
	}
	o.started, o.last = true, l
	o.pending = append(o.pending, l)
	if len(o.pending) > maxObservePending {
		o.pending = append(o.pending[:0], o.pending[1:]...)
	}
}

// apply queues what a read found: every change after the last one read,
// when the record still has them, else the current state alone; then the
// current state, which differs from the last change when the leader lost
// its lock without resigning.
func (o *observer) apply(st *electionState) {
	if st.contiguous {
		for _, ch := range st.changes {
			if ch.ver > o.seen {
				o.push(ch.l)
			}
		}
	}
	if n := len(st.changes); n > 0 {
		o.seen = st.changes[n-1].ver
	}
	o.push(st.current())
}

func sameLeader(a, b Leader) bool {
	return a.Value == b.Value && a.Owner == b.Owner && a.Term == b.Term && a.Since.Equal(b.Since)
}

func (e *Election) observe(ctx context.Context, out chan<- Leader) {
	c := e.c
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.ctx, cancel)() // Close ends it
	var sub *subscription
	defer func() { sub.close() }()
	expiry := time.NewTimer(time.Hour)
	expiry.Stop()
	defer expiry.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	var o observer
	look, fails, unsubscribed := true, 0, 0
	for {
		if look {
			look = false
			// Subscribe before reading, and drain before each read, so
			// that a change published after the read always signals.
			live := sub != nil && c.notify.isLive(e.ch)
			if !live {
				sub.close()
				sub, live = c.notify.subscribe(ctx, e.ch)
			}
			sub.drain()
			st, err := e.read(ctx, o.seen)
			switch {
			case ctx.Err() != nil:
				return
			case refused(err):
				c.cfg.logger.Error("dsync: Observe ended: Redis refuses the election's read (grant the Client's ACL user the commands dsync needs)", "kind", KindElection, "name", shortName(e.name), "err", err)
				return
			case err != nil:
				fails++
				retry.Reset(backoff(fails))
			default:
				fails = 0
				o.apply(&st)
				expiry.Stop()
				if st.current().Term != 0 {
					// Its lease running out publishes nothing: look then.
					expiry.Reset(max(st.pttl, 0) + time.Millisecond)
				}
				if live {
					unsubscribed = 0
				} else {
					// Not subscribed (the pub/sub connection is down or
					// busy): look again, and subscribe again, with backoff.
					unsubscribed++
					retry.Reset(backoff(unsubscribed))
				}
			}
		}
		var send chan<- Leader
		var next Leader
		if len(o.pending) > 0 {
			send, next = out, o.pending[0]
		}
		select {
		case send <- next:
			o.pending = o.pending[1:]
		case <-sub.C:
			look = true
		case <-expiry.C:
			look = true
		case <-retry.C:
			look = true
		case <-ctx.Done():
			return
		}
	}
}
