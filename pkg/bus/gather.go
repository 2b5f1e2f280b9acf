package bus

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"google.golang.org/protobuf/proto"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Gather publishes req on subject and hands each reply to fn, from every
// responder (a scatter-gather: a takeover announcement answered by every
// executor of a model), until fn returns false or ctx ends. Error replies
// are skipped. The replies must fit in one message each.
func (c *Conn) Gather(ctx context.Context, subject string, req proto.Message, fn func(data []byte) bool) error {
	body, err := proto.Marshal(req)
	if err != nil {
		return tritonerr.Internalf("bus: cannot encode request to %s: %v", target(subject), err)
	}
	reply, in := c.registerInbox(false, ReplyClass(subject))
	defer c.unregister(reply)
	hdr := nats.Header{}
	if d, ok := ctx.Deadline(); ok {
		setDeadline(hdr, d)
	}
	otel.GetTextMapPropagator().Inject(ctx, HeaderCarrier(hdr))
	if err := c.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Header: hdr, Data: body}); err != nil {
		return tritonerr.Unavailablef("bus: cannot publish on %s: %v", target(subject), err)
	}
	for {
		m, err := in.next(ctx, 0)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return transferError(err, subject)
		}
		if remoteError(m.Header) != nil {
			continue
		}
		if !fn(m.Data) {
			return nil
		}
	}
}

// SubscribeAll is Subscribe for a wildcard: fn also gets the subject each
// message came on.
func (c *Conn) SubscribeAll(pattern string, fn func(ctx context.Context, subject string, data []byte)) (*Subscription, error) {
	s := &Subscription{}
	err := c.subscribe(s, pattern, "", func(m *nats.Msg) {
		ctx := context.Background()
		if len(m.Header) > 0 {
			ctx = otel.GetTextMapPropagator().Extract(ctx, HeaderCarrier(m.Header))
		}
		fn(ctx, m.Subject, m.Data)
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// ServePing answers PingSubject(service) with the service's name, which is
// how probes and tests tell that the service is up.
func (c *Conn) ServePing(service string) (*Subscription, error) {
	s := &Subscription{}
	err := c.subscribe(s, PingSubject(service), "", func(m *nats.Msg) {
		if m.Reply != "" {
			_ = c.nc.Publish(m.Reply, []byte(service))
		}
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Flush waits until the server has processed everything sent so far
// (subscriptions included), for at most ctx (5 s when ctx has no
// deadline).
func (c *Conn) Flush(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	if err := c.nc.FlushWithContext(ctx); err != nil {
		return tritonerr.Unavailablef("bus: flush: %v", err)
	}
	return nil
}
