// Package exredis connects the examples to Redis: to REDIS_ADDR when it is
// set, otherwise to an embedded in-process server (miniredis), so every
// example runs on a fresh machine with nothing installed.
package exredis

import (
	"context"
	"fmt"
	"os"

	"github.com/dsync/dsync/dsynctest"
	"github.com/redis/rueidis"
)

// Server is where the examples' clients connect: dsynctest's in-process
// server, or REDIS_ADDR.
type Server struct{ *dsynctest.Server }

// Start returns REDIS_ADDR, or starts an embedded server.
func Start() (*Server, error) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		return &Server{&dsynctest.Server{Addr: addr}}, nil
	}
	s, err := dsynctest.StartEmbedded()
	if err != nil {
		return nil, err
	}
	return &Server{s}, nil
}

// Client returns a new rueidis client for the server, with the options
// the embedded server needs (dsynctest.Server.ClientOption).
func (s *Server) Client() (rueidis.Client, error) {
	return rueidis.NewClient(s.ClientOption())
}

// Describe says which server is in use.
func (s *Server) Describe() string {
	if s.Embedded {
		return "embedded miniredis (set REDIS_ADDR to use a real Redis)"
	}
	return "Redis at " + s.Addr
}

// Forget deletes the keys matching each glob pattern (SCAN, then DEL), so
// that an example run against a real Redis leaves nothing behind.
func Forget(ctx context.Context, rc rueidis.Client, patterns ...string) error {
	for _, p := range patterns {
		var cursor uint64
		for {
			e, err := rc.Do(ctx, rc.B().Scan().Cursor(cursor).Match(p).Count(1000).Build()).AsScanEntry()
			if err != nil {
				return fmt.Errorf("cleaning up %s: %w", p, err)
			}
			if len(e.Elements) > 0 {
				if err := rc.Do(ctx, rc.B().Del().Key(e.Elements...).Build()).Error(); err != nil {
					return fmt.Errorf("cleaning up %s: %w", p, err)
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return nil
}
