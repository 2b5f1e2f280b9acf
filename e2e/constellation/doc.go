// Package constellation runs Nereid's services as real processes for
// end-to-end tests: it builds the binaries once, starts nats-server,
// redis-server, executors, gateways and the standalone server on free
// loopback ports, and tears them down with the test.
package constellation
