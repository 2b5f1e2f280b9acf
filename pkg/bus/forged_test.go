package bus

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
)

// TestForgedReplyRefused: a well-formed answer published on a reply
// subject that is not the request's own (another class of responder on
// the same inbox number, a wrong nonce, the inbox number alone) is refused
// and counted, and the request still gets its real answer.
func TestForgedReplyRefused(t *testing.T) {
	s := startServer(t, 0)
	client, srv := connect(t, s), connect(t, s)
	subject := InferSubject("forged", "1")

	// An eavesdropper on the request subject (what a compromised executor
	// of the model sees) learns the reply subject; the forger then tries
	// the subjects it may publish to.
	spy, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close()
	replies := make(chan string, 1)
	if _, err := spy.Subscribe(subject, func(m *nats.Msg) { replies <- m.Reply }); err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	forgedDone := make(chan struct{})
	mustHandle(t, srv, subject, QueueExecutors, func(ctx context.Context, req []byte) (proto.Message, error) {
		select {
		case <-forgedDone:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return decode(req)
	})

	before := ForgedReplies()
	errc := make(chan error, 1)
	var got []byte
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var out = bytesValue(nil)
		err := client.Request(ctx, subject, bytesValue([]byte("real")), out)
		got = out.Value
		errc <- err
	}()
	var reply string
	select {
	case reply = <-replies:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never arrived")
	}
	if class := strings.Split(strings.TrimPrefix(reply, client.prefix), ".")[0]; class != "executor" {
		t.Fatalf("reply subject %q: class %q, want executor", reply, class)
	}
	i := strings.LastIndexByte(reply, '.')
	j := strings.LastIndexByte(reply[:i], '.')
	seq, nonce := reply[i+1:], reply[j+1:i]
	forged, _ := proto.Marshal(bytesValue([]byte("forged")))
	for _, subj := range []string{
		client.prefix + "shm-registry." + nonce + "." + seq, // another role's class
		client.prefix + "executor.0." + seq,                 // a guessed nonce
		client.prefix + seq,                                 // the inbox number alone
	} {
		if err := spy.Publish(subj, forged); err != nil {
			t.Fatal(err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for ForgedReplies()-before < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(forgedDone)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, []byte("real")) {
		t.Fatalf("the requester accepted %q, want the real answer", got)
	}
	if n := ForgedReplies() - before; n != 3 {
		t.Fatalf("%d forged replies counted, want 3", n)
	}
}

// TestProbesHideReplySubjects: a liveness probe, which every role may read,
// names requests by an id that does not contain their reply subjects, and
// the responder holding the request still recognises it.
func TestProbesHideReplySubjects(t *testing.T) {
	s := startServer(t, 0)
	client := connect(t, s, WithLiveness(50*time.Millisecond))
	srv := connect(t, s)
	obs, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	probes := make(chan []byte, 64)
	if _, err := obs.Subscribe(AliveSubject, func(m *nats.Msg) {
		select {
		case probes <- m.Data:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := obs.Flush(); err != nil {
		t.Fatal(err)
	}
	subject := InferSubject("probed", "1")
	release := make(chan struct{})
	mustHandle(t, srv, subject, QueueExecutors, func(ctx context.Context, req []byte) (proto.Message, error) {
		<-release
		return decode(req)
	})
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		errc <- client.Request(ctx, subject, bytesValue([]byte("x")), nil)
	}()
	var probe []byte
	select {
	case probe = <-probes:
	case <-time.After(10 * time.Second):
		t.Fatal("no probe")
	}
	// Probed several sweeps: the answers keep the request alive.
	time.Sleep(500 * time.Millisecond)
	close(release)
	if err := <-errc; err != nil {
		t.Fatalf("a probed request whose responder holds it failed: %v", err)
	}
	if len(probe) == 0 || len(probe)%probeIDLen != 0 {
		t.Fatalf("probe of %d bytes, want ids of %d", len(probe), probeIDLen)
	}
	if bytes.Contains(probe, []byte("_INBOX")) || bytes.Contains(probe, []byte(client.prefix[len("_INBOX."):])) {
		t.Fatalf("probe %q shows a reply subject", probe)
	}
}

func TestReplyClass(t *testing.T) {
	for subj, want := range map[string]string{
		InferSubject("m", "1"):                  "executor",
		InferDeviceSubject("m", "1", "node", 0): "executor",
		SequenceInferSubject("m", "1"):          "executor_sequence-router",
		ShmRegisterSubject:                      "shm-registry",
		SettingsSubject(SettingsTrace):          "all",
		SettingsSyncSubject(SettingsTrace):      "gateway",
		SequenceTakeoverSubject("m", "1"):       "gateway_executor",
		"not.a.nereid.subject":                  unroutedClass,
		ExecutorStatsSubject("e1"):              "executor",
		GatewayStatsSubject:                     "gateway",
		PlacementStateSubject:                   "sequence-router",
		PlacementPinSubject:                     "sequence-router",
		PlacementControlSubject:                 "sequence-router",
	} {
		if got := ReplyClass(subj); got != want {
			t.Errorf("ReplyClass(%q) = %q, want %q", subj, got, want)
		}
	}
	if got := peerClass("_INBOX.gateway.abc.executor.x.1"); got != "gateway" {
		t.Errorf("peerClass = %q", got)
	}
}

// TestRepliesConfinedToTheirClass: the permissions let a role publish only
// into the inboxes of requests it answers (and of transfers it takes part
// in): the shm-registry cannot reach a gateway's inference inbox, a gateway
// cannot reach any role's inference inbox.
func TestRepliesConfinedToTheirClass(t *testing.T) {
	may := func(r Role, subject string) bool {
		for _, p := range RolePermissions(r).Publish {
			if subjectMatches(p, subject) {
				return true
			}
		}
		return false
	}
	gwInfer := InboxPrefix(RoleGateway) + ".N.executor.x.1"
	exInfer := InboxPrefix(RoleExecutor) + ".N.executor.x.1"
	gwSeq := InboxPrefix(RoleGateway) + ".N.executor_sequence-router.x.1"
	for _, c := range []struct {
		r       Role
		subject string
		want    bool
	}{
		{RoleExecutor, gwInfer, true},
		{RoleExecutor, exInfer, true},
		{RoleExecutor, gwSeq, true},
		{RoleSequenceRouter, gwSeq, true},
		{RoleShmRegistry, InboxPrefix(RoleGateway) + ".N.shm-registry.x.1", true},
		{RoleShmRegistry, gwInfer, false},
		{RoleShmRegistry, gwSeq, false},
		{RoleShmRegistry, exInfer, false},
		{RoleGateway, gwInfer, false},
		{RoleGateway, exInfer, false},
		{RoleGateway, gwSeq, false},
		{RoleSequenceRouter, gwInfer, false},
		{RoleGateway, "_INBOX.>", false},
		{RoleShmRegistry, InboxPrefix(RoleGateway) + ".N.1", false},
	} {
		if got := may(c.r, c.subject); got != c.want {
			t.Errorf("%s may publish to %s: %v, want %v", c.r, c.subject, got, c.want)
		}
	}
}
