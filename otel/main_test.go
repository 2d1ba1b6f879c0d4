package dsyncotel_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// srv is the redis-server shared by this package's tests; each test uses
// its own key prefix.
var srv *redistest.Server

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		if err := runHolder(spec); err != nil {
			fmt.Fprintln(os.Stderr, "holder:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	var err error
	srv, err = redistest.StartServer()
	if err != nil && os.Getenv("CI") != "" {
		fmt.Fprintln(os.Stderr, "redis-server is required under CI:", err)
		os.Exit(1)
	}
	code := m.Run()
	if srv != nil {
		srv.Stop()
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreCurrent()); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func server(t testing.TB) *redistest.Server {
	t.Helper()
	redistest.Require(t)
	require.NotNil(t, srv, "the shared redis-server did not start")
	return srv
}
