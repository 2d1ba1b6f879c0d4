package dsync

import (
	"context"
	"errors"
	"testing"
	"time"
)

// countingProto counts what waitLoop asks of a wait.
type countingProto struct{ looks, undos, gaveUps *int }

func (p countingProto) attempt(context.Context, int) (bool, time.Duration, error) {
	*p.looks++
	return true, 0, context.Canceled // what a look under an ended context gets back
}
func (p countingProto) failed(error)                { *p.undos++ }
func (p countingProto) waiting()                    {}
func (p countingProto) gaveUp()                     { *p.gaveUps++ }
func (p countingProto) granted(uint64, uint64) bool { return false }

// A wait whose context ended before its first look sends no look, undoes
// nothing and gives up nothing: nothing was sent. (Callers check the
// context on entry; a wait meets an ended one by a race with that check.)
// Before waitLoop checked the context before every look, the first look
// went out under the ended context and was then undone (failed), for
// every primitive but the record waits, which checked it themselves.
func TestWaitLoopEndedBeforeFirstLookSendsNothing(t *testing.T) {
	var looks, undos, gaveUps int
	p := countingProto{&looks, &undos, &gaveUps}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n, err := waitLoop(nil, ctx, "", "", false, p)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if n != 0 || looks != 0 || undos != 0 || gaveUps != 0 {
		t.Fatalf("returned %d attempts; looks sent %d, undone %d, given up %d: want all 0", n, looks, undos, gaveUps)
	}
}
