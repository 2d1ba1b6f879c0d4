package dsyncotel_test

import (
	"context"
	"testing"

	dsyncotel "github.com/dsync/dsync/otel"
	"github.com/stretchr/testify/require"
)

// An Election's campaign and term are an acquire and a hold span of kind
// "election", and count in the lock metrics under that kind.
func TestObserverElection(t *testing.T) {
	s := server(t)
	tel := newTelemetry(t)
	c := client(t, s, newPrefix(), tel.observer())
	ctx, job := tel.tp.Tracer("test").Start(context.Background(), "job")
	e := c.NewElection("leader")
	lctx, err := e.Campaign(ctx, "me")
	require.NoError(t, err)
	require.NoError(t, e.Resign(lctx))
	job.End()
	require.Len(t, tel.spansUnder(job.SpanContext(), "dsync.election.acquire"), 1, "campaign span")
	require.Len(t, tel.spansUnder(job.SpanContext(), "dsync.election.hold"), 1, "term span")
	tel.mustValue(t, "dsync.lock.hold.duration", 1, dsyncotel.KeyKind.String("election"))
}
