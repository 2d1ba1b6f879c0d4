package dsync

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// The renewal session. Off a Cluster, a Client renews the Mutex holds it
// has held for a renewal interval or more through one key of its own,
// "<prefix>:s:<sid>", instead of one by one: their values are bound to it
// (" s<sid>", mutex_renew_session.lua), and a bound hold whose session key
// is gone is free (lib.lua's lock_orphaned). Each round renews the session
// with one PEXPIRE, which moves every bound hold's lease clock; a bound
// hold is itself written only every sessionEvery-th round (sooner when
// slow rounds would outrun its backstop: sessionLate), which moves its
// key's backstop TTL (sessionBackstop: 7/3 of the lease) and checks it is
// still the hold's. So per held Mutex and round Redis does about a fifth
// of a batched renewal, and a hold deleted behind dsync's back (not
// force-unlocked: that is published) is noticed within sessionEvery
// rounds, not one.
//
// A session key that expired is never made again: a Client whose session
// was found gone (it did not renew it for a lease: a paused process, or
// Redis lost it) loses every hold bound to it and starts a new one, with a
// new sid, so that no old hold comes back to life.

// defaultSessionEvery is how many rounds apart a bound hold is written
// (testHooks.sessionEvery): the backstop (sessionBackstop) is then
// rewritten every 5/3 of a lease, and lasts 2/3 of a lease beyond, for
// retries (a failed round is retried a ninth of a lease later). For 1M
// held locks at the default lease (make scale, issue 40 asking 8% of a
// Redis main thread), three rounds apart (backstop 2 x lease) measured
// 9.1% (2026-12-06 17:52 UTC), four rounds 7.6% and 8.09% (19:01 and
// 21:40 UTC).
const defaultSessionEvery = 5

// sessionBackstop is the TTL a write of a bound hold gives its key,
// 7/3 of the lease (mutex_renew_session.lua, in whole ms as there): the
// lease, plus sessionEvery rounds of lease/3 less one, plus a third of a
// lease for a late or retried round.
func sessionBackstop(lease time.Duration) time.Duration {
	return time.Duration(7*lease.Milliseconds()/3) * time.Millisecond
}

// whySession: the Client's renewal session was found gone.
const whySession = "its Client's renewal session was found gone from Redis (not renewed for a whole lease: the process was paused or cut off that long, or Redis lost its data)"

// A session is the renewal loop's state of the Client's session (its
// goroutine alone touches it).
type session struct {
	sid string // "" while the Client has none
	key string
	// n counts the rounds; phaseAt[p] is when the last round that wrote
	// phase p began (its turn, n % every == p, or sessionLate; or the
	// session, if later): a bound hold of phase p (hold.id % every) had
	// its key written at or after it.
	n       uint64
	phaseAt []time.Time
	// due[p]: this round writes the bound holds of phase p (sessionDue):
	// its turn, or its backstop would not last until the next round's
	// reply (sessionLate).
	due []bool
	// took is how long the last round took (round trips: two on a
	// round that renews the session, its PEXPIRE and then the batches).
	took time.Duration
}

// sessionsOn reports whether c binds holds to a session: off a Cluster
// (a Cluster needs a session key per slot, not built), unless a test
// turned it off.
func (c *Client) sessionsOn() bool { return !c.cluster && c.cfg.test.sessionEvery > 0 }

// sessionHold reports whether h is renewed through the session when it
// can be: a watchdog hold of a Mutex (a FairMutex's value carries its
// grant, which the session script does not keep).
func sessionHold(h *hold) bool {
	_, ok := h.ops.(*Mutex)
	return ok && h.watchdog
}

// newSID makes a session id: digits only, so that a binding (" s<sid>")
// holds none of the letters the Mutex's scripts look for among a value's
// flags (" b", " w").
func newSID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return strconv.FormatUint(binary.LittleEndian.Uint64(b[:])>>1, 10)
}

// renewSession renews the Client's session (making one if it has none
// and holds wants it: some hold could be bound), before the round's
// batches, and applies the reply to the bound holds: renewed, their
// lease clocks move on (to no later than their backstop allows); gone,
// they are lost. It returns the bound holds it could not renew (Redis
// unreachable), with the error. Called by round, on the renewal loop.
func (r *renewer) renewSession(start time.Time, holds []*hold) (failed []*hold, failure error) {
	c, s := r.c, &r.sess
	var bound []*hold
	wants := false
	for _, h := range holds {
		if !sessionHold(h) {
			continue
		}
		wants = true
		if h.bound {
			bound = append(bound, h)
		}
	}
	every := uint64(c.cfg.test.sessionEvery)
	if len(s.phaseAt) != int(every) {
		s.phaseAt = make([]time.Time, every)
		s.due = make([]bool, every)
	}
	s.n++
	clear(s.due)
	if !wants {
		// No hold to bind: the session (if any) expires unrenewed.
		s.sid, s.key = "", ""
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.lease/2)
	defer cancel()
	if s.sid == "" {
		sid := newSID()
		key := c.cfg.prefix + ":s:" + sid
		err := c.rc.Do(ctx, c.rc.B().Set().Key(key).Value("1").Nx().Px(c.cfg.lease).Build()).Error()
		if err != nil && !rueidis.IsRedisNil(err) {
			return nil, err
		}
		if err == nil {
			s.sid, s.key = sid, key
			for i := range s.phaseAt {
				s.phaseAt[i] = start
			}
		}
		return nil, nil
	}
	sentAt := time.Now()
	n, err := c.rc.Do(ctx, c.rc.B().Pexpire().Key(s.key).Milliseconds(c.cfg.lease.Milliseconds()).Build()).AsInt64()
	if err != nil {
		return bound, err
	}
	if n == 0 {
		// Gone: every hold bound to it is lost; the next round makes a
		// new one.
		s.sid, s.key = "", ""
		for _, h := range bound {
			h.bound = false
			h.renewReply(false, sentAt, c.cfg.lease, whySession)
		}
		return nil, nil
	}
	// A bound hold's key lives until its backstop, written at or after
	// phaseAt of its phase: its lease clock may not run past that,
	// whatever the session's.
	gap := validity(sessionBackstop(c.cfg.lease)) - validity(c.cfg.lease)
	for _, h := range bound {
		at := sentAt
		if b := s.phaseAt[h.id%every].Add(gap); b.Before(at) {
			at = b
		}
		h.renewReply(true, at, c.cfg.lease, whyGone)
	}
	// This round writes the bound holds of its phase (sessionDue), and
	// those of any phase whose backstop would not outlast the next round
	// (rounds slowed by latency): from now on their backstop is at least
	// this recent (one whose write fails is no longer bound).
	for p := range s.phaseAt {
		if uint64(p) == s.n%every || r.sessionLate(s.phaseAt[p], start) {
			s.due[p] = true
			s.phaseAt[p] = start
		}
	}
	return nil, nil
}

// sessionLate reports whether bound holds whose keys were last written at
// or after at must be written by the round that begins now, not at their
// phase's turn: their backstop (sessionBackstop from at) would run out,
// or come within a third of a lease (room for retries), before the next
// round's replies arrive, rounds taking as long as the last one (under
// latency, two round trips can outlast the interval between rounds).
func (r *renewer) sessionLate(at, now time.Time) bool {
	c := r.c
	step := max(c.cfg.lease/3, r.sess.took)
	return now.Add(step + r.sess.took + c.cfg.lease/3).After(at.Add(validity(sessionBackstop(c.cfg.lease))))
}

// sessionDue reports whether the round writes the bound hold h (see
// renewSession), with the session begun (renewSession ran first).
func (r *renewer) sessionDue(h *hold) bool {
	every := uint64(r.c.cfg.test.sessionEvery)
	return !h.bound || r.sess.sid == "" || r.sess.due[h.id%every]
}

// sessionReply reads MutexRenewSession's reply {gone, flipped}.
func sessionReply(r rueidis.RedisResult) (gone, flipped []int64, err error) {
	arr, err := r.ToArray()
	if err != nil {
		return nil, nil, err
	}
	if len(arr) != 2 {
		return nil, nil, errors.New("dsync: unexpected reply from the session renewal script")
	}
	if gone, err = arr[0].AsIntSlice(); err != nil {
		return nil, nil, err
	}
	flipped, err = arr[1].AsIntSlice()
	return gone, flipped, err
}
