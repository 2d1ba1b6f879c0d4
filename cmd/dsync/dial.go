package main

import (
	"net"
	"time"
)

// netDialer bounds the connection attempt, so an unreachable address fails
// within the timeout rather than the operating system's.
func netDialer(timeout time.Duration) net.Dialer {
	return net.Dialer{Timeout: timeout, KeepAlive: time.Minute}
}
