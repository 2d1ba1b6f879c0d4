package dsync

import (
	"context"
	"strconv"
	"time"

	"github.com/dsync/dsync/internal/scripts"
)

// handoff moves the lock from hold h to owner to in one script and returns
// the new hold; with check, it yields instead if other processes wait. It
// returns nil with the reason if it could do neither.
func (m *Mutex) handoff(ctx context.Context, h *hold, to string, check bool) (nh *hold, yielded bool, err error) {
	c := m.c
	lease := m.lease()
	own := "-1"
	if check {
		own = "0"
		if c.notify.isLive(m.ch()) {
			own = "1"
		}
	}
	args := []string{h.rOwner, strconv.FormatUint(h.rToken, 10), to, m.leaseArg, own, m.c.args.mark, m.blockArg, strconv.FormatUint(h.token, 10)}
	var vals []int64
	var sentAt time.Time
	err = idempotent(ctx, func(ctx context.Context) (err error) {
		sentAt = time.Now()
		vals, err = c.lua(scripts.MutexHandoff).Exec(ctx, c.rc, m.relKeys, args).AsIntSlice()
		return err
	})
	if err != nil {
		return nil, false, wrapErr(KindMutex, m.info.Name, err)
	}
	if len(vals) == 1 && vals[0] == 2 {
		return nil, true, nil
	}
	if len(vals) < 2 || vals[0] != 1 {
		// h was not this owner's alone (lost, or re-entered through another
		// Client): release our part normally.
		code, err := m.release(ctx, h.rOwner, h.rToken, h.token)
		if err == nil && code == 0 {
			err = ErrNotHeld
		}
		return nil, false, wrapErr(KindMutex, m.info.Name, err)
	}
	nh = m.newHold(to, uint64(vals[1]))
	nh.rToken = nh.token + uint64(m.block) - 1
	if !nh.track(sentAt, lease) {
		// Closed meanwhile: nobody will renew or release the new hold.
		_, _ = m.release(ctx, to, nh.rToken, nh.token)
		return nil, false, ErrClosed
	}
	return nh, false, nil
}
