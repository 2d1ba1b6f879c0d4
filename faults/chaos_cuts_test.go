package faults

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// Long histories are checked in windows. Porcupine caches, for every
// state it reaches, a bitset as long as the whole history, so its memory
// grows with the square of the history's length: a 30-minute soak's Mutex
// history (hundreds of thousands of operations on one name) took it past
// 20 GB. A window is checked from the states the previous one may end in,
// with an "end" operation after its last one that asserts the state the
// next window starts from; windows are cut so that no operation of a later
// window precedes (in real time) one of an earlier window, which
// windowsSeparated checks. The linearizations of the windows then join
// into one of the whole history, and a history is linearizable only if
// such a chain exists: the windowed check decides exactly what one check
// of the whole history decides, every operation against the model.

// windowOps is the least number of operations in a window (the last may
// have fewer). Porcupine's memory for a window is about windowOps²/8 bytes
// per cached state.
var windowOps = 2000

// windowsSeparated reports an operation of a later window that returned
// before one of an earlier window was called ("" if there is none).
func windowsSeparated(wins [][]porcupine.Operation) string {
	minRet := make([]int64, len(wins)+1) // the earliest return in wins[i:]
	minRet[len(wins)] = math.MaxInt64
	for i := len(wins) - 1; i >= 0; i-- {
		minRet[i] = minRet[i+1]
		for _, o := range wins[i] {
			minRet[i] = min(minRet[i], o.Return)
		}
	}
	maxCall := int64(math.MinInt64)
	for i, w := range wins[:max(len(wins)-1, 0)] {
		for _, o := range w {
			maxCall = max(maxCall, o.Call)
		}
		if minRet[i+1] < maxCall {
			return fmt.Sprintf("window %d has an operation called at %d, after an operation of a later window returned at %d", i, maxCall, minRet[i+1])
		}
	}
	return ""
}

// endOp is the "end" probe after every operation of a window.
func endOp(w []porcupine.Operation, in chIn) porcupine.Operation {
	var last int64
	for _, o := range w {
		last = max(last, o.Return)
	}
	in.op = "end"
	return porcupine.Operation{ClientId: -1, Input: in, Call: last + 1, Return: last + 1}
}

// lockWindows cuts a history of the mutex model (each worker's
// acquisitions and releases, paired in call order) at holds. From a hold's
// acquire return to its release call its holder w certainly holds, in
// every linearization, so no operation is linearized there, and every
// other operation falls on one side of the hold: one that returned before
// the release was called lies before it, one called after the acquire
// returned lies after it, and one spanning the hold lies after it if it is
// an acquisition (its holder would hold beside w, or before w while its
// release lies after) and before it if it is a release (likewise). The
// window before the cut ends with the hold's acquisition, in state w (its
// end operation asserts it); the window after it starts in state w. Cuts
// are at least every operations apart. holders[i] is the state window i
// starts in (-1: free).
func lockWindows(ops []porcupine.Operation, every int) (wins [][]porcupine.Operation, holders []int) {
	if len(ops) <= every {
		return [][]porcupine.Operation{ops}, []int{-1}
	}
	byCall := slices.Clone(ops)
	slices.SortStableFunc(byCall, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	type hold struct {
		who         int
		aRet, rCall int64
		a, r        porcupine.Operation
	}
	var holds []hold
	// Holds whose release was called before the acquisition returned (a
	// wipe of the server's data released them early, applyWipes) may lie
	// on either side of a cut: no cut is made where one could, or where
	// the rule below would part its acquisition from its release.
	var early []hold
	// A worker's k-th acquisition goes with its k-th release, in call
	// order, as the model pairs them.
	acqs, rels := map[int][]porcupine.Operation{}, map[int][]porcupine.Operation{}
	for _, o := range byCall {
		in := o.Input.(chIn)
		if in.op == "acq" {
			acqs[in.who] = append(acqs[in.who], o)
		} else {
			rels[in.who] = append(rels[in.who], o)
		}
	}
	for who, as := range acqs {
		for k, a := range as[:min(len(as), len(rels[who]))] {
			o := rels[who][k]
			h := hold{who, a.Return, o.Call, a, o}
			holds = append(holds, h)
			if h.rCall < h.aRet {
				early = append(early, h)
			}
		}
	}
	after := func(o porcupine.Operation, acq bool, c hold) bool {
		return o.Return >= c.rCall && (acq || o.Call > c.aRet)
	}
	unsure := func(c hold) bool {
		for _, h := range early {
			both := h.a.Call <= c.aRet && h.r.Call <= c.aRet && h.a.Return >= c.rCall && h.r.Return >= c.rCall
			if both || after(h.a, true, c) != after(h.r, false, c) {
				return true
			}
		}
		return false
	}
	slices.SortFunc(holds, func(a, b hold) int { return cmp.Compare(a.aRet, b.aRet) })
	var cuts []hold
	last := 0
	for _, h := range holds {
		if h.aRet >= h.rCall || (len(cuts) > 0 && h.aRet <= cuts[len(cuts)-1].rCall) || unsure(h) {
			continue
		}
		i := sort.Search(len(byCall), func(j int) bool { return byCall[j].Call > h.aRet })
		if i-last < every || len(byCall)-i < every/2 {
			continue
		}
		cuts = append(cuts, h)
		last = i
	}
	// An operation lies after cut c if it returned at or after c's release
	// call and (is an acquisition or) was called after c's acquire
	// returned. The cuts follow each other in time, so the cuts it lies
	// after are the first n.
	wins = make([][]porcupine.Operation, len(cuts)+1)
	for _, o := range ops {
		n := sort.Search(len(cuts), func(j int) bool { return cuts[j].rCall > o.Return })
		if o.Input.(chIn).op != "acq" {
			n = min(n, sort.Search(len(cuts), func(j int) bool { return cuts[j].aRet >= o.Call }))
		}
		wins[n] = append(wins[n], o)
	}
	holders = []int{-1}
	for _, c := range cuts {
		holders = append(holders, c.who)
	}
	return wins, holders
}

// checkLockWindows checks a mutex-model history window by window (see
// lockWindows). It returns porcupine's verdict and, if it is not Ok,
// which window.
func checkLockWindows(model porcupine.Model, ops []porcupine.Operation, timeout time.Duration) (porcupine.CheckResult, string) {
	wins, holders := lockWindows(ops, windowOps)
	if bad := windowsSeparated(wins); bad != "" {
		return porcupine.Illegal, "cut wrongly: " + bad
	}
	for i, w := range wins {
		m := model
		start := holders[i]
		m.Init = func() interface{} { return start }
		if i+1 < len(wins) {
			w = append(slices.Clone(w), endOp(w, chIn{who: holders[i+1]}))
		}
		if res := porcupine.CheckOperationsTimeout(m, w, timeout); res != porcupine.Ok {
			return res, fmt.Sprintf("window %d of %d (%d operations)", i+1, len(wins), len(w))
		}
	}
	return porcupine.Ok, ""
}

// quiescentWindows cuts a history where no operation is in flight: every
// operation before the cut returned before every operation after it was
// called. Windows have at least every operations.
func quiescentWindows(ops []porcupine.Operation, every int) [][]porcupine.Operation {
	byCall := slices.Clone(ops)
	slices.SortStableFunc(byCall, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	var wins [][]porcupine.Operation
	var cur []porcupine.Operation
	maxRet := int64(math.MinInt64)
	for _, o := range byCall {
		if len(cur) >= every && o.Call > maxRet {
			wins = append(wins, cur)
			cur = nil
		}
		cur = append(cur, o)
		maxRet = max(maxRet, o.Return)
	}
	return append(wins, cur)
}

// wgEnds are the counters a WaitGroup window may end in, starting from
// one of starts: the start plus the Adds that applied (an "ok" Add did, an
// "inval" one did not, any other may have), never below zero. It is a
// superset of the counters some linearization ends in (the model decides
// which); nil if there are more than most.
func wgEnds(starts []int64, w []porcupine.Operation, most int) []int64 {
	set := map[int64]bool{}
	for _, s := range starts {
		set[s] = true
	}
	for _, o := range w {
		in := o.Input.(chIn)
		if in.op != "add" || in.out == "inval" {
			continue
		}
		next := map[int64]bool{}
		for v := range set {
			next[v+in.n] = true
			if in.out != "ok" {
				next[v] = true
			}
		}
		if len(next) > 4*most {
			return nil
		}
		set = next
	}
	var out []int64
	for v := range set {
		if v >= 0 {
			out = append(out, v)
		}
	}
	if len(out) > most {
		return nil
	}
	slices.Sort(out)
	return out
}

// checkWGWindows checks a WaitGroup history window by window, cut where
// no operation is in flight. The counters a window may end in are those
// of wgEnds for which the window followed by an end operation asserting
// the counter is linearizable; the next window starts from any of them.
// A window whose ends are too many to try is joined to the next.
func checkWGWindows(ops []porcupine.Operation, timeout time.Duration) (porcupine.CheckResult, string) {
	segs := quiescentWindows(ops, windowOps)
	if bad := windowsSeparated(segs); bad != "" {
		return porcupine.Illegal, "cut wrongly: " + bad
	}
	starts := []int64{0}
	var w []porcupine.Operation
	for i, seg := range segs {
		w = append(w, seg...)
		nm := wgModel()
		ss := slices.Clone(starts)
		nm.Init = func() []interface{} {
			out := make([]interface{}, len(ss))
			for j, s := range ss {
				out[j] = s
			}
			return out
		}
		m := nm.ToModel()
		if i == len(segs)-1 {
			if res := porcupine.CheckOperationsTimeout(m, w, timeout); res != porcupine.Ok {
				return res, fmt.Sprintf("the last window (%d operations, from counters %v)", len(w), starts)
			}
			return porcupine.Ok, ""
		}
		ends := wgEnds(starts, w, 16)
		if ends == nil {
			continue // too many to try: join the next window
		}
		var next []int64
		for _, c := range ends {
			switch porcupine.CheckOperationsTimeout(m, append(slices.Clone(w), endOp(w, chIn{n: c})), timeout) {
			case porcupine.Ok:
				next = append(next, c)
			case porcupine.Unknown:
				return porcupine.Unknown, fmt.Sprintf("window %d of %d (%d operations)", i+1, len(segs), len(w))
			}
		}
		if len(next) == 0 {
			return porcupine.Illegal, fmt.Sprintf("window %d of %d (%d operations, from counters %v)", i+1, len(segs), len(w), starts)
		}
		starts, w = next, nil
	}
	return porcupine.Ok, ""
}
