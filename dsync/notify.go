package dsync

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// shardedConfirmWait bounds how long a waiter waits for a new sharded
// subscription to be confirmed (normally one round trip) before it polls;
// it is signalled when the confirmation comes.
const shardedConfirmWait = 250 * time.Millisecond

// subLinger is how long a channel nobody waits on stays subscribed, so a
// busy lock does not subscribe and unsubscribe on every wait.
const subLinger = 2 * time.Second

// The notifier multiplexes every wakeup channel of the Client over one
// dedicated pub/sub connection. Waiters take a subscription, and are
// signalled on a message for their channel and whenever the connection
// breaks (a message may have been lost, so they must look again).
type notifier struct {
	c *Client
	// sharded: in a Redis 7 cluster each channel is subscribed with SSUBSCRIBE on
	// the node that owns its slot, by one receive loop per channel (see
	// receive), instead of on the one dedicated connection.
	sharded bool

	// opMu guards dc. Subscribers share it (and do not wait for it while
	// the loop reconnects: they poll instead; a sweep they wait out, see
	// subscribeNow); the loop takes it alone, so an UNSUBSCRIBE it sends
	// cannot overtake a later SUBSCRIBE.
	// subsMu guards the map and every channelSubs in it (but fn, set when
	// the entry is made), and is never held across a round trip, because
	// rueidis' reader dispatches messages under it. Lock order: opMu →
	// subsMu → subscription.gmu, subsMu → Client.mu (see locking.go).
	opMu sync.RWMutex
	// sweeping is set while sweep wants or holds opMu.
	sweeping atomic.Bool
	subsMu   sync.RWMutex
	subs     map[string]*channelSubs
	dc       rueidis.DedicatedClient // nil while disconnected; guarded by opMu
}

type channelSubs struct {
	waiters map[*subscription]struct{}
	live    bool      // subscribed on the current connection
	idle    time.Time // when the last waiter left

	// Sharded mode: stop ends the channel's receive loop; ready is closed
	// when the subscription is confirmed, and replaced when it breaks;
	// broken is set while the loop retries after an error.
	stop   context.CancelFunc
	ready  chan struct{}
	broken bool

	// fn, set on the Client's control channel (see forceChannel), takes
	// its messages; the channel stays subscribed for the Client's life.
	fn func(msg string)
}

// A subscription is one waiter's interest in one channel.
type subscription struct {
	n  *notifier
	ch string
	// C receives a value when the waiter should look again.
	C chan struct{}
	// id, when set, names the wait on a channel that carries grants
	// ("<id> <token> <µs>", see fair_lib.lua): only the message for id
	// signals it, and stores the grant (see takeGrant).
	id string
	// all: the channel is shared by every Client's waits (a Mutex's), and
	// a message that is not a grant (a release that granted nobody) is a
	// wakeup for every wait on it, with an id or not.
	all bool
	// tok is the token of a grant not yet taken; at its server time in µs
	// (0 if the message had none). tok is written after at, under gmu, so
	// a reader that sees tok set reads the pair under gmu.
	gmu     sync.Mutex
	tok, at uint64
	pending atomic.Bool // a grant is stored: the waiter's fast check
}

// setGrant stores a grant for the waiter.
func (s *subscription) setGrant(tok, at uint64) {
	s.gmu.Lock()
	s.tok, s.at = tok, at
	s.gmu.Unlock()
	s.pending.Store(true)
}

// takeGrant returns the grant delivered to the waiter (token 0: none) and
// forgets it, so that a grant the waiter found dead and claimed again with
// an attempt is not looked at twice.
func (s *subscription) takeGrant() (tok, at uint64) {
	if !s.pending.Load() {
		return 0, 0
	}
	s.gmu.Lock()
	tok, at = s.tok, s.at
	s.tok, s.at = 0, 0
	s.pending.Store(false)
	s.gmu.Unlock()
	return tok, at
}

func newNotifier(c *Client) *notifier {
	n := &notifier{c: c, sharded: c.sharded, subs: make(map[string]*channelSubs)}
	n.subs[c.forceChannel()] = &channelSubs{waiters: make(map[*subscription]struct{}), fn: c.onForce}
	return n
}

// subscribe registers interest in ch. It reports whether the channel is
// known to be subscribed, so that a waiter can rely on being woken; when it
// is not (Redis unreachable), the waiter must poll.
func (n *notifier) subscribe(ctx context.Context, ch string) (*subscription, bool) {
	return n.listen(ctx, n.register(ch, "", false))
}

// register adds a waiter on ch (for the grants to wait id, if id is set)
// without subscribing: listen does that.
func (n *notifier) register(ch, id string, all bool) *subscription {
	s := &subscription{n: n, ch: ch, C: make(chan struct{}, 1), id: id, all: all}
	n.subsMu.Lock()
	cs := n.subs[ch]
	if cs == nil {
		cs = &channelSubs{waiters: make(map[*subscription]struct{})}
		n.subs[ch] = cs
	}
	cs.waiters[s] = struct{}{}
	n.subsMu.Unlock()
	return s
}

// listen makes sure the channel of the registered waiter s is subscribed,
// and reports whether it is, as subscribe does.
func (n *notifier) listen(ctx context.Context, s *subscription) (*subscription, bool) {
	ch := s.ch
	n.subsMu.RLock()
	cs := n.subs[ch]
	live := cs != nil && cs.live
	n.subsMu.RUnlock()
	if live || cs == nil {
		return s, live
	}
	if n.sharded {
		return s, n.awaitSharded(ctx, ch, cs)
	}
	// The SUBSCRIBE runs on a goroutine of its own, so that the waiter
	// returns at once when ctx ends: rueidis may wait out a command in
	// flight on the dedicated connection (a stalled Redis) whatever the
	// caller's context.
	done := make(chan bool, 1)
	c := n.c
	if !c.spawn(&c.loops, func() { done <- n.subscribeNow(ch, cs) }) {
		return s, false
	}
	select {
	case ok := <-done:
		return s, ok
	case <-ctx.Done():
	case <-c.done:
	}
	return s, false
}

// subscribeNow subscribes ch on the dedicated connection, unless the loop
// is reconnecting (then the waiter polls), and reports whether ch is
// subscribed. A sweep (one UNSUBSCRIBE, bounded by a second) it waits out:
// a waiter that polled instead would back off while the sweep ran, and see
// a change made meanwhile up to a second late (with a Group's channel per
// key, the sweeps of the rolling restart unsubscribed hundreds of
// channels, and a run cut by a Close was taken over 1.28 s late).
func (n *notifier) subscribeNow(ch string, cs *channelSubs) bool {
	if !n.opMu.TryRLock() {
		if !n.sweeping.Load() {
			return false
		}
		n.opMu.RLock()
	}
	defer n.opMu.RUnlock()
	n.subsMu.RLock()
	live := cs.live
	n.subsMu.RUnlock()
	if live || n.dc == nil {
		return live
	}
	ctx, cancel := context.WithTimeout(n.c.ctx, 5*time.Second)
	defer cancel()
	if err := n.dc.Do(ctx, n.dc.B().Subscribe().Channel(ch).Build()).Error(); err != nil {
		return false
	}
	n.subsMu.Lock()
	if n.subs[ch] == cs {
		cs.live = true
	}
	n.subsMu.Unlock()
	return true
}

// Sharded mode (a Redis 7 cluster, see notifier.sharded): a receive loop
// per channel, SSUBSCRIBEd on the node that owns its slot.

// awaitSharded starts the receive loop of ch if it has none, and waits
// briefly for its subscription to be confirmed. While the loop retries
// after an error (Redis unreachable) it does not wait: the waiter polls,
// and is signalled when the subscription is back.
func (n *notifier) awaitSharded(ctx context.Context, ch string, cs *channelSubs) bool {
	n.subsMu.Lock()
	if cs.stop == nil {
		if !n.startReceiveLocked(ch, cs) {
			n.subsMu.Unlock()
			return false
		}
	}
	ready, broken := cs.ready, cs.broken
	n.subsMu.Unlock()
	if broken {
		return false
	}
	t := time.NewTimer(shardedConfirmWait)
	defer t.Stop()
	select {
	case <-ready:
		return true
	case <-t.C:
	case <-ctx.Done():
	case <-n.c.done:
	}
	return false
}

// startReceiveLocked starts the receive loop of ch, unless the Client is closed.
// subsMu is held.
func (n *notifier) startReceiveLocked(ch string, cs *channelSubs) bool {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return false
	}
	ctx, stop := context.WithCancel(c.ctx)
	cs.stop, cs.ready = stop, make(chan struct{})
	c.loops.Add(1)
	go n.receive(ctx, ch, cs)
	return true
}

// receive keeps ch subscribed with SSUBSCRIBE until ctx ends. rueidis sends
// the command to the node that owns the channel's slot and returns when the
// subscription ends: the connection broke, or the slot moved (the node
// sends SUNSUBSCRIBE); then every waiter is told to look again, and the
// channel is subscribed anew where its slot is now.
func (n *notifier) receive(ctx context.Context, ch string, cs *channelSubs) {
	c := n.c
	defer c.loops.Done()
	onSub := rueidis.WithOnSubscriptionHook(ctx, func(p rueidis.PubSubSubscription) {
		if p.Kind == "ssubscribe" && p.Channel == ch {
			n.setLive(cs, true)
		}
	})
	// Called after every attempt of Receive. Leaving for good (ctx ended):
	// drop the subscription on the connection, which belongs to the
	// caller's rueidis client and outlives this Client.
	onSub = rueidis.WithOnReceiveReturnHook(onSub, func(err error, cc rueidis.CommandClient) error {
		if ctx.Err() == nil {
			// rueidis' cluster Receive retries a broken connection itself,
			// calling this hook after every attempt: record the break here,
			// so waiters poll until the subscription is confirmed again.
			n.subsMu.Lock()
			cs.broken = err != nil
			n.subsMu.Unlock()
			n.setLive(cs, false)
		} else {
			uctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = cc.Do(uctx, cc.B().Sunsubscribe().Channel(ch).Build()).Error()
		}
		return err
	})
	wake := func(m rueidis.PubSubMessage) { n.deliver(cs, ch, m.Message) }
	for attempt := 1; ; attempt++ {
		err := c.rc.Receive(onSub, c.rc.B().Ssubscribe().Channel(ch).Build(), wake)
		n.setLive(cs, false)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			attempt = 0 // unsubscribed by the node (slot moved): at once
			continue
		}
		n.subsMu.Lock()
		cs.broken = true
		n.subsMu.Unlock()
		c.cfg.logger.Debug("dsync: wakeup subscription broke", "channel", ch, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff(attempt)):
		}
	}
}

// setLive records whether cs is subscribed, and wakes its waiters: after a
// confirmation they look again, since a message may have been sent before
// it; after a break they poll until it is back.
func (n *notifier) setLive(cs *channelSubs, live bool) {
	n.subsMu.Lock()
	control := false
	if cs.live != live {
		cs.live = live
		if live {
			cs.broken = false
			close(cs.ready)
			control = cs.fn != nil
			if control {
				n.c.catchingUp.Add(1) // seen with live: see controlLive
			}
		} else {
			cs.ready = make(chan struct{})
		}
	}
	for s := range cs.waiters {
		signal(s)
	}
	n.subsMu.Unlock()
	if control {
		n.c.controlLive() // the notices sent before it are lost too
	}
}

// isLive reports whether this Client is subscribed to ch right now.
func (n *notifier) isLive(ch string) bool {
	n.subsMu.RLock()
	defer n.subsMu.RUnlock()
	cs := n.subs[ch]
	return cs != nil && cs.live
}

// drain discards a pending signal; call it before each look at the lock, so
// a message that arrives during the look is not missed.
func (s *subscription) drain() {
	select {
	case <-s.C:
	default:
	}
}

func (s *subscription) close() {
	if s == nil {
		return
	}
	n := s.n
	n.subsMu.Lock()
	if cs := n.subs[s.ch]; cs != nil {
		delete(cs.waiters, s)
		if len(cs.waiters) == 0 {
			cs.idle = time.Now()
		}
	}
	n.subsMu.Unlock()
}

func signal(s *subscription) {
	select {
	case s.C <- struct{}{}:
	default:
	}
}

// deliver signals the waiters of cs for message msg: the waiters without
// an id all, a grant ("<id> <token> <µs>", the grant's server time; a
// script of an older version sends "<id> <token>") or a call to look again
// ("<id>") only the wait it names; on a channel shared by all Clients
// (all), a message without a space (a Mutex's release that granted
// nobody, "<token>") every wait. A grant no wait here takes may be one to
// a wait of this Client that is gone (grantUnclaimed).
func (n *notifier) deliver(cs *channelSubs, ch, msg string) {
	if cs.fn != nil {
		cs.fn(msg)
		return
	}
	id, rest, grant := strings.Cut(msg, " ")
	tok, at := parseGrant(rest)
	taken := false
	n.subsMu.RLock()
	for s := range cs.waiters {
		if s.id == "" {
			signal(s)
		} else if s.id == id {
			if grant && tok != 0 {
				s.setGrant(tok, at)
				taken = true
			}
			signal(s)
		} else if s.all && !grant {
			signal(s)
		}
	}
	n.subsMu.RUnlock()
	if grant && tok != 0 && !taken {
		n.c.grantUnclaimed(ch, id)
	}
}

// parseGrant reads "<token> <µs>" or "<token>" (at 0: the grant's time is
// unknown); token 0 when it is neither.
func parseGrant(s string) (tok, at uint64) {
	t, u, _ := strings.Cut(s, " ")
	tok, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		return 0, 0
	}
	if u != "" {
		at, _ = strconv.ParseUint(u, 10, 64)
	}
	return tok, at
}

func (n *notifier) onMessage(m rueidis.PubSubMessage) {
	n.subsMu.RLock()
	cs := n.subs[m.Channel]
	n.subsMu.RUnlock()
	if cs != nil {
		n.deliver(cs, m.Channel, m.Message)
	} else if id, rest, grant := strings.Cut(m.Message, " "); grant {
		if tok, _ := parseGrant(rest); tok != 0 {
			n.c.grantUnclaimed(m.Channel, id)
		}
	}
}

// disconnected marks every channel unsubscribed and wakes every waiter.
func (n *notifier) disconnected() {
	n.subsMu.Lock()
	for _, cs := range n.subs {
		cs.live = false
		for s := range cs.waiters {
			signal(s)
		}
	}
	n.subsMu.Unlock()
}

// loop keeps the pub/sub connection up, resubscribes after a break, and
// unsubscribes channels nobody has waited on for subLinger.
func (n *notifier) loop() {
	c := n.c
	defer c.loops.Done()
	sweep := time.NewTicker(subLinger)
	defer sweep.Stop()
	if n.sharded {
		n.subsMu.Lock()
		ch := c.forceChannel()
		n.startReceiveLocked(ch, n.subs[ch])
		n.subsMu.Unlock()
		for {
			select {
			case <-c.done:
				return
			case <-sweep.C:
				n.sweep()
			}
		}
	}
	for attempt := 1; ; attempt++ {
		dc, cancel := c.rc.Dedicate()
		errc := dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: n.onMessage})
		if n.connect(dc) {
			attempt = 0
		wait:
			for {
				select {
				case <-c.done:
					n.close(dc, cancel)
					return
				case <-errc:
					break wait
				case <-sweep.C:
					n.sweep()
				}
			}
		}
		n.opMu.Lock()
		n.dc = nil
		n.opMu.Unlock()
		n.disconnected()
		cancel()
		if attempt > 0 {
			select {
			case <-c.done:
				return
			case <-time.After(backoff(attempt)):
			}
		}
	}
}

// connect installs dc and subscribes every channel with waiters on it.
func (n *notifier) connect(dc rueidis.DedicatedClient) bool {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	n.subsMu.RLock()
	chans := make([]string, 0, len(n.subs))
	for ch := range n.subs {
		chans = append(chans, ch)
	}
	n.subsMu.RUnlock()
	ctx, cancel := context.WithTimeout(n.c.ctx, 5*time.Second)
	defer cancel()
	// A PING proves the connection even with nothing to subscribe yet
	// (pinned as sharedDial pins read-only commands: pinResent).
	if err := dc.Do(ctx, pinResent(dc.B().Ping().Build())).Error(); err != nil {
		return false
	}
	if len(chans) > 0 {
		if err := dc.Do(ctx, dc.B().Subscribe().Channel(chans...).Build()).Error(); err != nil {
			return false
		}
	}
	n.dc = dc
	n.subsMu.Lock()
	control := false
	for _, ch := range chans {
		if cs := n.subs[ch]; cs != nil {
			cs.live = true
			if cs.fn != nil && !control {
				n.c.catchingUp.Add(1) // seen with live: see controlLive
			}
			control = control || cs.fn != nil
		}
	}
	// Wake everyone: messages sent while we were away are lost.
	for _, cs := range n.subs {
		for s := range cs.waiters {
			signal(s)
		}
	}
	n.subsMu.Unlock()
	if control {
		n.c.controlLive() // and so are the control channel's notices
	}
	return true
}

func (n *notifier) sweep() {
	n.sweeping.Store(true)
	defer n.sweeping.Store(false)
	n.opMu.Lock()
	defer n.opMu.Unlock()
	var idle []string
	n.subsMu.Lock()
	for ch, cs := range n.subs {
		if len(cs.waiters) == 0 && cs.fn == nil && time.Since(cs.idle) >= subLinger {
			delete(n.subs, ch)
			if cs.stop != nil {
				cs.stop() // its receive loop unsubscribes
				continue
			}
			// Not live too: a SUBSCRIBE whose caller's context ended while
			// it was on its way may have reached the server all the same.
			idle = append(idle, ch)
		}
	}
	n.subsMu.Unlock()
	if len(idle) > 0 && n.dc != nil {
		ctx, cancel := context.WithTimeout(n.c.ctx, time.Second)
		defer cancel()
		// Held under opMu, so a new SUBSCRIBE of one of these channels is
		// sent after this UNSUBSCRIBE.
		_ = n.dc.Do(ctx, n.dc.B().Unsubscribe().Channel(idle...).Build()).Error()
	}
}

func (n *notifier) close(dc rueidis.DedicatedClient, cancel func()) {
	n.opMu.Lock()
	n.dc = nil
	n.opMu.Unlock()
	n.disconnected()
	dc.SetPubSubHooks(rueidis.PubSubHooks{})
	// Closing the connection drops its subscriptions; a connection in
	// subscribe mode must not go back to the pool.
	dc.Close()
	cancel()
}
