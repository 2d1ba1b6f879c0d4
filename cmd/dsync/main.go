// Command dsync looks at and repairs dsync locks in Redis.
//
// Usage:
//
//	dsync [flags] inspect NAME          holders, fencing tokens, leases, queue
//	dsync [flags] list [PATTERN]        lock names matching a glob (SCAN, never KEYS)
//	dsync [flags] watch NAME            print each change until interrupted
//	dsync [flags] top [PATTERN]         the most contended locks, refreshed every --interval
//	dsync [flags] unlock --force --yes NAME
//	                                    release NAME whoever holds it and wake its waiters
//	dsync help [COMMAND]                the help, of all or of one command
//
// Flags (also accepted after the command):
//
//	--addr ADDR          Redis address (env REDIS_ADDR; default 127.0.0.1:6379)
//	--tls                connect with TLS
//	--tls-ca FILE        CA certificates (PEM) for the server's certificate (implies --tls)
//	--tls-server-name N  name the server's certificate must carry (implies --tls)
//	--user USER          ACL user (env REDIS_USER)
//	--password PASS      password (env REDIS_PASSWORD; prefer the variable)
//	--prefix PREFIX      dsync key prefix (default "dsync")
//	--json               machine-readable output
//	--interval D         poll interval of watch (default 250ms); with keyspace
//	                     notifications on the server, watch is woken by them
//	--timeout D          bound on connecting and on each command (default 5s)
//	--limit N            rows shown by top (default 20)
//	-h, --help           help, on standard output
//
// The exit status is 0 when the command did what it says, 1 on an error
// (Redis unreachable or refusing, no such lock), 2 on bad usage and 3 when
// there was nothing to do (unlock found nothing it could release).
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
