package scripts

import (
	"strconv"

	"github.com/redis/rueidis"
)

// The calls of the Mutex's scripts, and of the scripts that read and
// reset locks for Client.Inspect and Client.ForceUnlock and keep hold
// tags. The Mutex's hot paths (the acquire, the release, the renewal and
// Close batches) reuse their caller's buffers: their builders append.

// AppendMutexAcquireKeys appends to dst the keys of an acquisition of the
// lock key (mutex_acquire.lua): with the attempt's marker, which it sets
// so that a lost reply can be undone exactly (MutexUndoCall); marker ""
// for an owner made for the call, whose mark the script names itself.
func AppendMutexAcquireKeys(dst []string, key, marker string) []string {
	if marker == "" {
		return append(dst, key)
	}
	return append(dst, key, marker)
}

// AppendMutexAcquireArgs appends to dst the arguments of an attempt of
// owner to acquire or re-enter the lock for lease ms (mutex_acquire.lua),
// leaving out those that are the script's defaults. wait: the attempt
// waits if the lock is held (false: a try, which takes none of the wait's
// arguments); client is the waiting Client, count how many of its
// goroutines wait ("" not to register them this time), registered that an
// earlier attempt of the wait registered it. reserve is the number of
// tokens to reserve ("1": the acquisition's own). alone: the attempt may
// go as the owner alone, the script's one-argument form, if nothing else
// is left: owner is "<client><deadline><n>" with a deadline in server
// seconds, and lease is the script's default (dsync.DefaultLease); it is
// sent so when the other arguments are the defaults, count 1, nothing
// registered or reserved, and client the owner less its last 16
// characters.
func AppendMutexAcquireArgs(dst []string, owner, lease string, wait bool, client, count string, registered bool, reserve string, alone bool) []string {
	start := len(dst)
	dst = append(dst, owner, lease)
	if reserve != "1" {
		// Every argument, up to the block (ARGV[6]).
		reg := "0"
		switch {
		case !wait:
			client, count = "", ""
		case registered:
			reg = "1"
		}
		return append(dst, client, count, reg, reserve)
	}
	if !wait {
		return dst
	}
	dst = append(dst, client)
	switch {
	case registered:
		return append(dst, count, "1")
	case count != "1":
		return append(dst, count)
	}
	if alone && len(owner) > 16 && client == owner[:len(owner)-16] {
		return dst[:start+1]
	}
	return dst
}

// AppendMutexReleaseArgs appends to dst the arguments of the release of
// one hold of the lock (mutex_release.lua, whose key is the lock key
// alone): the hold of token by owner (token 0: any hold of owner, sent as
// the owner alone), under which used was the last fencing token issued
// (0, or token itself: the script's default, left out). value is the
// hold's value "<owner> <token> 1" when the caller has it made (sent as
// it is), "" to make it here.
func AppendMutexReleaseArgs(dst []string, owner string, token, used uint64, value string) []string {
	switch {
	case token == 0:
		return append(dst, owner)
	case value == "":
		value = owner + " " + strconv.FormatUint(token, 10) + " 1"
	}
	if used == token || used == 0 {
		return append(dst, value)
	}
	return append(dst, value, strconv.FormatUint(used, 10))
}

// MutexHandoffKeys are the keys of a handoff of the lock key, whose
// wakeup channel is ch (mutex_handoff.lua); the first is the release's
// key too. An array: a Mutex makes them once and keeps them.
func MutexHandoffKeys(key, ch string) [2]string {
	return [2]string{key, ch}
}

// AppendMutexHandoffArgs appends to dst the arguments of a handoff of the
// lock (mutex_handoff.lua, keys MutexHandoffKeys) from the hold of
// fromToken by from, under which used was the last token issued, to the
// owner to, for lease ms. yield is what the handoff asks first: "-1" hand
// over; "w" yield to the waits of other Clients if one marked the lock;
// n ("0", "1") yield if one marked it and the channel has more than n
// subscribers (the caller's own subscription). markerLife is the free
// marker's lifetime in ms (for a yield), reserve the tokens the new
// holder's Client reserves.
func AppendMutexHandoffArgs(dst []string, from string, fromToken uint64, to, lease, yield, markerLife, reserve string, used uint64) []string {
	return append(dst, from, strconv.FormatUint(fromToken, 10), to, lease, yield, markerLife, reserve, strconv.FormatUint(used, 10))
}

// MutexUndoCall undoes the acquisition of the lock key by owner made by
// the attempt with marker, if and only if the acquire applied it
// (mutex_undo.lua, then mutex_release.lua's release of one hold of
// owner's). It can be repeated.
func MutexUndoCall(key, marker, owner string) Call {
	return Call{MutexUndo, rueidis.LuaExec{Keys: []string{key, marker}, Args: []string{owner}}}
}

// MutexUndoFreshCall undoes an acquisition of the lock key by owner, an
// owner made for that one call: it marks the attempt undone (mark, "<lock
// key>:x:<owner>"), then releases whatever owner holds
// (mutex_undo_fresh.lua, then mutex_release.lua). It can be repeated.
func MutexUndoFreshCall(key, mark, owner string) Call {
	return Call{MutexUndoFresh, rueidis.LuaExec{Keys: []string{key, mark}, Args: []string{owner}}}
}

// AppendMutexRenewManyArgs appends to args the arguments of a batch of
// renewals (mutex_renew_many.lua) that are the batch's own: the lease in
// ms. Its holds follow (AppendMutexRenewManyHold).
func AppendMutexRenewManyArgs(args []string, lease string) []string {
	return append(args, lease)
}

// AppendMutexRenewManyHold appends to a batch of renewals
// (mutex_renew_many.lua) the hold of the lock key whose value is value,
// "<owner> <token> 1".
func AppendMutexRenewManyHold(keys, args []string, key, value string) ([]string, []string) {
	return append(keys, key), append(args, value)
}

// AppendMutexRenewSessionHead appends to keys and args the keys and
// arguments of a session's batch of renewals (mutex_renew_session.lua)
// that are the batch's own: the session key, the lease in ms, the
// session's sid, and whether the batch's holds are believed bound to the
// session. Its holds follow (AppendMutexRenewSessionHold).
func AppendMutexRenewSessionHead(keys, args []string, session, lease, sid string, bound bool) ([]string, []string) {
	mode := "u"
	if bound {
		mode = "b"
	}
	return append(keys, session), append(args, lease, sid, mode)
}

// AppendMutexRenewSessionHold appends to a session's batch of renewals
// (mutex_renew_session.lua) the hold of the lock key whose value is value,
// "<owner> <token> 1" (bound or not, as the batch): as a hold of
// mutex_renew_many.lua's.
func AppendMutexRenewSessionHold(keys, args []string, key, value string) ([]string, []string) {
	return AppendMutexRenewManyHold(keys, args, key, value)
}

// AppendMutexReleaseManyHold appends to a batch of releases
// (mutex_release_many.lua) the hold of token by owner of the lock key,
// under which used was the last fencing token issued (0, or token itself:
// sent as "", the script's default). token is not 0: the batch releases
// known holds only.
func AppendMutexReleaseManyHold(keys, args []string, key, owner string, token, used uint64) ([]string, []string) {
	u := ""
	if used != token && used != 0 {
		u = strconv.FormatUint(used, 10)
	}
	return append(keys, key), append(args, owner+" "+strconv.FormatUint(token, 10)+" ", u)
}

// MutexLocalWaitersCall records that waiting goroutines of client (0:
// none, the entry removed) wait for the lock key inside their process,
// for lease ms unless written again (mutex_local_waiters.lua).
func MutexLocalWaitersCall(key, client string, waiting int, lease string) Call {
	return Call{MutexLocalWaiters, rueidis.LuaExec{Keys: []string{key, key + ":waiting"},
		Args: []string{client + " local", strconv.Itoa(waiting), lease}}}
}

// InspectLockCall reads the lock key of a Mutex, or of a FairMutex
// (fair), and at most most of its waiters (inspect_lock.lua).
func InspectLockCall(key string, fair bool, most int) Call {
	keys, layout := []string{key, key + ":waiting"}, "waiting"
	if fair {
		keys, layout = FairKeys(key), "queue"
	}
	return Call{InspectLock, rueidis.LuaExec{Keys: keys, Args: []string{strconv.Itoa(most), layout}}}
}

// InspectOtherCall reads a primitive of layout ("rw", "sem", "once",
// "wg", "group" or "cond"), whose keys are keys in the order
// inspect_other.lua lists for the layout, and at most most of its
// waiters.
func InspectOtherCall(layout string, keys []string, most int) Call {
	return Call{InspectOther, rueidis.LuaExec{Keys: keys, Args: []string{layout, strconv.Itoa(most)}}}
}

// ForceUnlockCall releases the lock key of a Mutex, or of a FairMutex
// (fair), whoever holds it, leaving a free marker that lives markerLife
// ms (force_unlock.lua): a Mutex's release is published on its channel,
// a FairMutex's queue is passed on.
func ForceUnlockCall(key string, fair bool, markerLife string) Call {
	if fair {
		return Call{ForceUnlock, rueidis.LuaExec{Keys: FairKeys(key), Args: []string{markerLife, "", key + ":w:"}}}
	}
	return Call{ForceUnlock, rueidis.LuaExec{Keys: []string{key}, Args: []string{markerLife, key + ":ch", ""}}}
}

// ForceRWCall releases every hold of the RWMutex whose lock key is key,
// whoever holds them, and passes it on (force_rw.lua). Its ARGV[1], which
// the script does not read, is the readers' key prefix, as it always was.
func ForceRWCall(key string) Call {
	return Call{ForceRW, rueidis.LuaExec{Keys: RWKeys(key), Args: []string{key + ":r", key + ":w:"}}}
}

// ForceSemCall releases every permit of the Semaphore whose key is key,
// whoever holds them, and grants its waiters (force_sem.lua).
func ForceSemCall(key string) Call {
	return Call{ForceSem, rueidis.LuaExec{Keys: SemKeys(key), Args: []string{key + ":w:"}}}
}

// ForceOtherCall ends a Once's run (layout "once", key its state key)
// whoever runs it, or resets a WaitGroup's counter (layout "wg", key the
// counter), and wakes their waiters (force_other.lua).
func ForceOtherCall(layout, key string) Call {
	k := NewOnceKeys(key)
	keys := []string{k.Run, k.Channel}
	if layout == "wg" {
		keys = []string{key, key + ":ch", key + ":gen"}
	}
	return Call{ForceOther, rueidis.LuaExec{Keys: keys, Args: []string{layout}}}
}

// TagSyncCall applies a Client's hold-tag changes for one lock
// (tag_sync.lua): tags is the lock's tag hash, hist its history, kept
// histLife ms and at most maxHistory entries; now is the Client's clock in
// µs. The changes follow (AppendTagSyncChange). lease, the Client's lease
// in ms, is ARGV[1], which the script does not read.
func TagSyncCall(tags, hist, lease, histLife, maxHistory, now string) Call {
	return Call{TagSync, rueidis.LuaExec{Keys: []string{tags, hist}, Args: []string{lease, histLife, maxHistory, now}}}
}

// AppendTagSyncChange appends one change to a TagSync call's arguments:
// kind "s" a hold of owner began, its tag to live life ms, val "<start µs>
// <tag>"; "e" a hold ended (life ""), val "<end µs> <start µs> <tag>";
// "E" as "e" for a hold whose tag was never sent (tag_sync.lua).
func AppendTagSyncChange(args []string, kind, owner, life, val string) []string {
	return append(args, kind, owner, life, val)
}

// TagSetCall writes the tag of owner's hold in the lock's tag hash tags,
// to live life ms, or with renew renews it only if it is still there
// (tag_set.lua).
func TagSetCall(tags, owner, tag, life string, renew bool) Call {
	mode := "set"
	if renew {
		mode = "renew"
	}
	return Call{TagSet, rueidis.LuaExec{Keys: []string{tags}, Args: []string{owner, tag, life, mode}}}
}
