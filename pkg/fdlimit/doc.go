// Package fdlimit raises a process's limit on open file descriptors
// (RLIMIT_NOFILE) to the most it may have, and counts the descriptors it
// has open, so that a server can shed connections before it runs out.
//
// Go itself raises the soft limit to the hard one at start on Unix systems
// (Go 1.19 and later), and puts the original back for the processes it
// starts; Raise does it where that did not happen (and only then sets the
// limit, which would stop Go restoring it), and reports the limit in force
// for the service to log.
package fdlimit
