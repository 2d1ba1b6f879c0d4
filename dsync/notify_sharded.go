package dsync

import (
	"context"
	"time"

	"github.com/redis/rueidis"
)

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
	wake := func(m rueidis.PubSubMessage) { n.deliver(cs, m.Message) }
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
	if cs.live != live {
		cs.live = live
		if live {
			cs.broken = false
			close(cs.ready)
		} else {
			cs.ready = make(chan struct{})
		}
	}
	for s := range cs.waiters {
		signal(s)
	}
	n.subsMu.Unlock()
}
