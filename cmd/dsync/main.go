// Command dsync looks at and repairs dsync locks in Redis.
//
// Usage:
//
//	dsync [flags] inspect NAME          holders, fencing tokens, leases, queue
//	dsync [flags] list [PATTERN]        lock names matching a glob (SCAN, never KEYS)
//	dsync [flags] watch NAME            print each change until interrupted
//	dsync [flags] unlock --force --yes NAME
//	                                    release NAME whoever holds it and wake its waiters
//
// Flags (also accepted after the command):
//
//	--addr ADDR      Redis address (env REDIS_ADDR; default 127.0.0.1:6379)
//	--tls            connect with TLS
//	--user USER      ACL user (env REDIS_USER)
//	--password PASS  password (env REDIS_PASSWORD; prefer the variable)
//	--prefix PREFIX  dsync key prefix (default "dsync")
//	--json           machine-readable output
//	--interval D     poll interval of watch (default 250ms)
//	--timeout D      bound on connecting and on each command (default 5s)
//
// The exit status is 0 on success, 1 on an error (Redis unreachable, no
// such lock) and 2 on bad usage.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
