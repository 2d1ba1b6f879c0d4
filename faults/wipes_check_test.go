package faults

import (
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFaultWipeAddCountsBeforeIt: an Add that a wipe of the server's data
// overlaps may have run before the data went, and counted in the epoch it
// was called in until then, or after, in the next (applyWipes). The soak's
// WaitGroup history was not linearizable where a worker's Add(1) was
// followed by its own Add(-1), refused as negative: another worker's
// Add(-1), called before a restart and failed by it, had run before it
// (make soak, 2026-12-05: a name of 1168, found from the run's events).
func TestFaultWipeAddCountsBeforeIt(t *testing.T) {
	wipes := []wipe{{from: 40, to: 50}}
	ev := []cev{
		{Op: "add", Who: 0, K: 0, N: 1, Out: "ok", Call: 10, Ret: 20},
		{Op: "add", Who: 1, K: 0, N: -1, Out: "err", Call: 30, Ret: 60}, // the wipe cut it
		{Op: "add", Who: 0, K: 0, N: -1, Out: "inval", Call: 31, Ret: 35},
		{Op: "add", Who: 2, K: 0, N: 1, Out: "ok", Call: 70, Ret: 80},
	}
	got := applyWipes("wg", ev, wipes)
	byEpoch := map[int][]porcupine.Operation{}
	for _, e := range got {
		byEpoch[e.epoch] = append(byEpoch[e.epoch], porcupine.Operation{ClientId: e.Who, Input: e.modelIn(), Output: e.Out, Call: e.Call, Return: e.Ret})
	}
	require.Len(t, byEpoch[0], 3, "epoch 0: the two clean Adds and the cut one, run before the wipe")
	require.Len(t, byEpoch[1], 2, "epoch 1: the cut Add, run after the wipe, and the clean one")
	for ep, ops := range byEpoch {
		res, where := checkWGWindows(ops, 0)
		assert.Equal(t, porcupine.Ok, res, "epoch %d: %s", ep, where)
	}
	// Without the cut Add, epoch 0 is not linearizable: the check sees it.
	res, _ := checkWGWindows([]porcupine.Operation{byEpoch[0][0], byEpoch[0][2]}, 0)
	assert.Equal(t, porcupine.Illegal, res, "the refused Add(-1) after the Add(1), alone")
}

// TestFaultWipeKeepsEveryEvent: an event that adds a second one (a run cut
// by a wipe: its "maybe" and itself) does not overwrite the next event
// (applyWipes once wrote its output over its input).
func TestFaultWipeKeepsEveryEvent(t *testing.T) {
	wipes := []wipe{{from: 40, to: 50}}
	ev := []cev{
		{Op: "acq", Who: 0, K: 0, Call: 10, Ret: 20},
		{Op: "rel", Who: 0, K: 0, Out: "ok", Val: "v", Call: 30, Ret: 60},
		{Op: "acq", Who: 1, K: 0, Call: 61, Ret: 62},
		{Op: "rel", Who: 1, K: 0, Out: "ok", Val: "w", Call: 63, Ret: 64},
	}
	got := applyWipes("oncevalue", ev, wipes)
	var ops []string
	for _, e := range got {
		ops = append(ops, e.Op)
	}
	assert.Equal(t, []string{"acq", "maybe", "rel", "acq", "rel"}, ops, "every event once, and the cut run's maybe")
}
