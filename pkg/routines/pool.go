package routines

import (
	"sync"
	"time"
)

// PoolIdle is how long a Pool's goroutine waits for more work before it
// exits.
const PoolIdle = 10 * time.Second

// Pool runs functions on goroutines it keeps between calls. A goroutine
// started per call begins with a small stack and grows it (copying it each
// time) as soon as the call goes deep, as a request's path through
// decoding, the bus and NATS does; a goroutine kept from an earlier call
// keeps its grown stack. Handing work to an idle goroutine costs the same
// wake-up as starting one. The zero value is ready to use; Close lets its
// idle goroutines go.
type Pool struct {
	once sync.Once
	work chan func()
	done chan struct{}
	shut sync.Once
}

func (p *Pool) init() {
	p.once.Do(func() {
		p.work = make(chan func())
		p.done = make(chan struct{})
	})
}

// Go runs f on an idle goroutine of the pool, or on a new one when all are
// busy, so that calls never wait for each other.
func (p *Pool) Go(f func()) {
	p.init()
	select {
	case p.work <- f:
	default:
		go p.loop(f)
	}
}

// Close makes idle goroutines exit, and busy ones once their call
// returns. Go still runs calls after Close, each on a goroutine of its own.
func (p *Pool) Close() {
	p.init()
	p.shut.Do(func() { close(p.done) })
}

func (p *Pool) loop(f func()) {
	f()
	t := time.NewTimer(PoolIdle)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		default:
		}
		select {
		case f := <-p.work:
			f()
			t.Reset(PoolIdle)
		case <-t.C:
			return
		case <-p.done:
			return
		}
	}
}
