// Package admincli is nereidctl: the cluster admin API (api/adminv1) from
// a terminal, as tables, and the drain of an executor that waits until it
// is drained (what a pod's preStop hook needs).
package admincli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nereid-io/nereid/api/adminv1"
)

// Usage is the command line's synopsis.
const Usage = `usage: nereidctl [flags] <command>

commands:
  gateways                 the gateways of the constellation
  executors                executors: node, GPUs, models, instances, requests in flight, drain state
  routers                  sequence routers and the models they lead
  regions                  registered shared-memory regions, by node
  placement                the placement controller's view: models and their executors, executors'
                           capacity and holdings, pins, models waiting, the latest decisions with reasons
  pin <model> <executor>...  pin a model to executors: placement loads it on each and never unloads it
                           from them (replaces the model's earlier pin)
  unpin <model>            remove a model's pin
  drain [executor]         drain an executor and wait until it is drained
  undrain [executor]       undo a drain, finished or not: the executor serves again
  drain-status [executor]  where an executor's drain stands
                           (executor: default $NEREID_EXECUTOR_ID, as an executor's pod sets it)`

// DrainPoll is how often drain asks for the status while it waits.
const DrainPoll = 500 * time.Millisecond

// Run runs one command (args after the flags) against client, writing
// tables and progress to out. executor is the executor drain and
// drain-status act on when the command line names none ("": none).
func Run(ctx context.Context, client adminv1.AdminClient, args []string, executor string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New(Usage)
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "gateways", "executors", "routers", "regions", "placement":
		if len(rest) > 0 {
			return fmt.Errorf("%s takes no arguments", cmd)
		}
	case "pin":
		if len(rest) < 2 {
			return errors.New("pin needs a model and at least one executor id")
		}
	case "unpin":
		if len(rest) != 1 {
			return errors.New("unpin needs one model")
		}
	case "drain", "undrain", "drain-status":
		if len(rest) == 0 && executor != "" {
			rest = []string{executor}
		}
		if len(rest) != 1 || rest[0] == "" {
			return fmt.Errorf("%s needs one executor id", cmd)
		}
	default:
		return fmt.Errorf("unknown command %q\n%s", cmd, Usage)
	}
	switch cmd {
	case "gateways":
		r, err := client.ListGateways(ctx, &adminv1.ListGatewaysRequest{})
		if err != nil {
			return err
		}
		return WriteGateways(out, r)
	case "executors":
		r, err := client.ListExecutors(ctx, &adminv1.ListExecutorsRequest{})
		if err != nil {
			return err
		}
		return WriteExecutors(out, r)
	case "routers":
		r, err := client.ListSequenceRouters(ctx, &adminv1.ListSequenceRoutersRequest{})
		if err != nil {
			return err
		}
		return WriteRouters(out, r)
	case "regions":
		r, err := client.ListShmRegions(ctx, &adminv1.ListShmRegionsRequest{})
		if err != nil {
			return err
		}
		return WriteRegions(out, r)
	case "placement":
		r, err := client.GetPlacement(ctx, &adminv1.GetPlacementRequest{})
		if err != nil {
			return err
		}
		return WritePlacement(out, r)
	case "pin":
		r, err := client.PinModel(ctx, &adminv1.PinModelRequest{Model: rest[0], Executors: rest[1:]})
		if err != nil {
			return err
		}
		return WritePlacement(out, r)
	case "unpin":
		r, err := client.UnpinModel(ctx, &adminv1.UnpinModelRequest{Model: rest[0]})
		if err != nil {
			return err
		}
		return WritePlacement(out, r)
	case "undrain":
		st, err := client.UndrainExecutor(ctx, &adminv1.UndrainExecutorRequest{ExecutorId: rest[0]})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(out, DescribeDrain(st))
		return err
	case "drain-status":
		st, err := client.GetDrainStatus(ctx, &adminv1.GetDrainStatusRequest{ExecutorId: rest[0]})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(out, DescribeDrain(st))
		return err
	}
	return Drain(ctx, client, rest[0], out)
}

// Drain starts the drain of executor id and waits, printing each change,
// until it is drained or ctx ends.
func Drain(ctx context.Context, client adminv1.AdminClient, id string, out io.Writer) error {
	st, err := client.DrainExecutor(ctx, &adminv1.DrainExecutorRequest{ExecutorId: id})
	if err != nil {
		return err
	}
	last := ""
	t := time.NewTicker(DrainPoll)
	defer t.Stop()
	for {
		if line := DescribeDrain(st); line != last {
			fmt.Fprintln(out, line)
			last = line
		}
		if st.GetState() == adminv1.DrainState_DRAIN_STATE_DRAINED {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("executor %s not drained: %w", id, ctx.Err())
		case <-t.C:
		}
		if st, err = client.GetDrainStatus(ctx, &adminv1.GetDrainStatusRequest{ExecutorId: id}); err != nil {
			return err
		}
	}
}

// DescribeDrain puts a drain status in one line.
func DescribeDrain(st *adminv1.DrainStatus) string {
	s := fmt.Sprintf("executor %s: %s", st.GetExecutorId(), drainWord(st.GetState()))
	if w := st.GetWaitingFor(); w != "" {
		s += " (waiting for " + w + ")"
	}
	return s
}

func drainWord(s adminv1.DrainState) string {
	switch s {
	case adminv1.DrainState_DRAIN_STATE_SERVING:
		return "serving"
	case adminv1.DrainState_DRAIN_STATE_DRAINING:
		return "draining"
	case adminv1.DrainState_DRAIN_STATE_DRAINED:
		return "drained"
	}
	return "unknown"
}

func table(out io.Writer, header string, rows [][]string) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, header)
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	return w.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func since(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

// WriteGateways prints one row per gateway.
func WriteGateways(out io.Writer, r *adminv1.ListGatewaysResponse) error {
	var rows [][]string
	for _, g := range r.GetGateways() {
		rows = append(rows, []string{g.GetId(), orDash(g.GetNode()), orDash(g.GetHttpAddress()), orDash(g.GetGrpcAddress()),
			orDash(g.GetAdminAddress()), strconv.FormatInt(g.GetExecutors(), 10), orDash(g.GetVersion()), since(g.GetStartedUnixMs())})
	}
	return table(out, "GATEWAY\tNODE\tHTTP\tGRPC\tADMIN\tEXECUTORS\tVERSION\tSTARTED", rows)
}

// WriteExecutors prints one row per executor, and the executors that did
// not answer.
func WriteExecutors(out io.Writer, r *adminv1.ListExecutorsResponse) error {
	var rows [][]string
	for _, e := range r.GetExecutors() {
		var gpus []string
		for _, g := range e.GetGpus() {
			gpus = append(gpus, fmt.Sprintf("%d:%s", g.GetIndex(), g.GetName()))
		}
		var models []string
		instances := 0
		for _, m := range e.GetModels() {
			if m.GetState() == "" {
				continue // in the repository, not loaded
			}
			v := m.GetName()
			if m.GetVersion() != "" {
				v += "/" + m.GetVersion()
			}
			if m.GetState() != "READY" {
				v += "(" + m.GetState() + ")"
			}
			models = append(models, v)
			instances += len(m.GetInstances())
		}
		rows = append(rows, []string{e.GetId(), orDash(e.GetNode()), orDash(strings.Join(gpus, ",")), orDash(strings.Join(models, ",")),
			strconv.Itoa(instances), strconv.FormatInt(e.GetInflightRequests(), 10), drainWord(e.GetDrainState())})
	}
	for _, u := range r.GetUnreachable() {
		rows = append(rows, []string{u.GetId(), "-", "-", "unreachable: " + u.GetError(), "-", "-", "-"})
	}
	return table(out, "EXECUTOR\tNODE\tGPUS\tMODELS\tINSTANCES\tINFLIGHT\tSTATE", rows)
}

// WriteRouters prints one row per model a router leads (a router leading
// none gets one row).
func WriteRouters(out io.Writer, r *adminv1.ListSequenceRoutersResponse) error {
	var rows [][]string
	for _, rt := range r.GetRouters() {
		if len(rt.GetModels()) == 0 {
			rows = append(rows, []string{rt.GetId(), orDash(rt.GetNode()), "-", "-", "-", "-", "-", "-"})
		}
		for _, m := range rt.GetModels() {
			var execs []string
			for _, e := range m.GetExecutors() {
				s := fmt.Sprintf("%s:%d", e.GetId(), e.GetActiveSequences())
				if e.GetDraining() {
					s += "(draining)"
				}
				execs = append(execs, s)
			}
			rows = append(rows, []string{rt.GetId(), orDash(rt.GetNode()), m.GetName() + "/" + m.GetVersion(),
				strconv.FormatUint(m.GetEpoch(), 10), strconv.FormatInt(m.GetActiveSequences(), 10),
				fmt.Sprintf("%d/%d", m.GetSlotsInUse(), m.GetSlots()),
				fmt.Sprintf("%d (%d requests)", m.GetBacklogSequences(), m.GetBacklogRequests()), orDash(strings.Join(execs, ","))})
		}
	}
	return table(out, "ROUTER\tNODE\tMODEL\tEPOCH\tSEQUENCES\tSLOTS\tBACKLOG\tEXECUTORS", rows)
}

// WriteRegions prints one row per region, by node.
func WriteRegions(out io.Writer, r *adminv1.ListShmRegionsResponse) error {
	var rows [][]string
	for _, n := range r.GetNodes() {
		for _, g := range n.GetRegions() {
			where := fmt.Sprintf("%s+%d", g.GetKey(), g.GetOffset())
			if g.GetKind() == "cuda" {
				where = "device " + strconv.FormatInt(g.GetDeviceId(), 10)
			}
			state := "registered"
			if g.GetAwaitingUnregister() {
				state = "awaiting unregister"
			}
			rows = append(rows, []string{orDash(n.GetNode()), g.GetName(), g.GetKind(), strconv.FormatUint(g.GetByteSize(), 10), where, state})
		}
	}
	return table(out, "NODE\tREGION\tKIND\tBYTES\tWHERE\tSTATE", rows)
}

// Flags are nereidctl's connection settings.
type Flags struct {
	Addr, CA, Cert, Key string
	TLS                 bool
	Restricted          string
	Timeout             time.Duration
}

// Register defines the flags on fs; the address defaults to
// $NEREID_ADMIN_ADDR, else 127.0.0.1:8003.
func (f *Flags) Register(fs *flag.FlagSet, env func(string) string) {
	addr := env("NEREID_ADMIN_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8003"
	}
	fs.StringVar(&f.Addr, "addr", addr, "the gateway's admin gRPC address (host:port; default $NEREID_ADMIN_ADDR)")
	fs.BoolVar(&f.TLS, "tls", false, "connect over TLS")
	fs.StringVar(&f.CA, "ca", "", "PEM root certificate verifying the gateway (with --tls)")
	fs.StringVar(&f.Cert, "cert", "", "PEM client certificate for mutual TLS")
	fs.StringVar(&f.Key, "key", "", "PEM client key for mutual TLS")
	fs.StringVar(&f.Restricted, "restricted", env("NEREID_ADMIN_RESTRICTED"),
		"<key>=<value> sent as metadata triton-grpc-protocol-<key> when the gateway restricts the admin group (default $NEREID_ADMIN_RESTRICTED)")
	fs.DurationVar(&f.Timeout, "timeout", 0, "give up after this long (0: lists time out after 30s, drain waits until drained)")
}

// Metadata is the restriction metadata to send, as key and value ("" for
// none).
func (f *Flags) Metadata() (key, value string, err error) {
	if f.Restricted == "" {
		return "", "", nil
	}
	k, v, ok := strings.Cut(f.Restricted, "=")
	if !ok || k == "" {
		return "", "", errors.New("--restricted wants <key>=<value>")
	}
	return "triton-grpc-protocol-" + strings.ToLower(k), v, nil
}

// WritePlacement prints the placement controller's view: its models and
// where they are, its executors with capacity and holdings, the models
// waiting and the latest decisions.
func WritePlacement(out io.Writer, p *adminv1.Placement) error {
	fmt.Fprintf(out, "controller %s\n\n", p.GetControllerId())
	var rows [][]string
	for _, m := range p.GetModels() {
		var flags []string
		for _, f := range []struct {
			on   bool
			name string
		}{{m.GetPinned(), "pinned"}, {m.GetGpu(), "gpu"}, {m.GetSequence(), "sequence"}} {
			if f.on {
				flags = append(flags, f.name)
			}
		}
		rows = append(rows, []string{m.GetName(), orDash(strings.Join(m.GetExecutors(), ",")), bytesOrDash(m.GetFootprintBytes()),
			bytesOrDash(m.GetGpuFootprintBytes()), replicaBound(m.GetMinReplicas()), replicaBound(m.GetMaxReplicas()), orDash(strings.Join(flags, ","))})
	}
	if err := table(out, "MODEL\tEXECUTORS\tFOOTPRINT\tGPU FOOTPRINT\tMIN\tMAX\tFLAGS", rows); err != nil {
		return err
	}
	rows = nil
	for _, e := range p.GetExecutors() {
		capa := bytesOrDash(e.GetCapacityBytes())
		if e.GetCapacitySlots() > 0 {
			capa += fmt.Sprintf(" / %d slots", e.GetCapacitySlots())
		}
		state := "serving"
		if e.GetDraining() {
			state = "draining"
		}
		gpu := "-" // no GPU
		if e.GetGpu() {
			gpu = bytesOrDash(e.GetHeldGpuBytes()) + " / " + bytesOrDash(e.GetGpuCapacityBytes())
		}
		rows = append(rows, []string{e.GetId(), orDash(e.GetNode()), capa, fmt.Sprintf("%s / %d models", bytesOrDash(e.GetHeldBytes()), e.GetHeldModels()),
			gpu, state})
	}
	fmt.Fprintln(out)
	if err := table(out, "EXECUTOR\tNODE\tCAPACITY\tHOLDS\tGPU HELD / MEMORY\tSTATE", rows); err != nil {
		return err
	}
	if len(p.GetPins()) > 0 {
		rows = nil
		for _, pin := range p.GetPins() {
			rows = append(rows, []string{pin.GetModel(), strings.Join(pin.GetExecutors(), ",")})
		}
		fmt.Fprintln(out)
		if err := table(out, "PINNED	TO EXECUTORS", rows); err != nil {
			return err
		}
	}
	if len(p.GetWaiting()) > 0 {
		rows = nil
		for _, w := range p.GetWaiting() {
			rows = append(rows, []string{w.GetModel(), strconv.FormatInt(w.GetReplicas(), 10), strconv.FormatBool(w.GetDemanded()), w.GetWhy()})
		}
		fmt.Fprintln(out)
		if err := table(out, "WAITING\tREPLICAS\tDEMANDED\tWHY", rows); err != nil {
			return err
		}
	}
	rows = nil
	for _, d := range p.GetDecisions() {
		reason := d.GetReason()
		if d.GetForModel() != "" {
			reason += " for " + d.GetForModel()
		}
		if d.GetError() != "" {
			reason += " (failed: " + d.GetError() + ")"
		}
		rows = append(rows, []string{time.UnixMilli(d.GetUnixMs()).UTC().Format(time.TimeOnly), d.GetAction(), d.GetModel(), d.GetExecutor(), reason})
	}
	fmt.Fprintln(out)
	return table(out, "AT\tACTION\tMODEL\tEXECUTOR\tREASON", rows)
}

func bytesOrDash(n uint64) string {
	if n == 0 {
		return "-"
	}
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + "B"
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func replicaBound(n int64) string {
	if n == 0 {
		return "default"
	}
	return strconv.FormatInt(n, 10)
}
