package executor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/backend"
	"github.com/nereid-io/nereid/pkg/infer"
	"github.com/nereid-io/nereid/pkg/tensor"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// Model warmup (model_warmup in the configuration) as Triton's core does
// it (backend_model_instance.cc, GenerateWarmupData and WarmUp): before a
// version turns READY, every instance of it runs every sample count times,
// each time one execution of batch_size requests. The requests are
// validated as a client's are (infer.Normalize) and run on the instance
// through the one execution path of every request (instance.execute), so
// that the backend sees what it will see when serving, and the executions
// count in the statistics, as Triton's do. A sample that fails fails the
// load with Triton's message. Every executor that loads the version warms
// its own instances.

// warmupFolder is the folder of a model's directory that input_data_file
// names its files in (Triton's kWarmupDataFolder).
const warmupFolder = "warmup"

// warmupSample is one model_warmup entry made ready to run.
type warmupSample struct {
	name string
	// count is the executions of the sample on each instance (Triton
	// runs a count of 0 once), batch the requests in each.
	count, batch int
	// req holds the sample's inputs that are the model's inputs; each
	// request of an execution is normalized from it.
	req *inference.ModelInferRequest
	// extra are the sample's other inputs (sequence control tensors,
	// implicit states), which go to the backend as they are, as Triton's
	// override inputs do.
	extra []backend.Input
}

// warmupSamples makes cfg's model_warmup into samples, with Triton's
// rules and messages: a batch_size of 0 skips the sample; zero_data is
// zeros, random_data random bytes (zeros for STRING, whose elements
// random bytes would not frame), input_data_file the contents of a file
// in dir's warmup folder (for STRING all of it, already framed as Triton
// frames BYTES elements; for other types the first bytes the dims call
// for). Each input gets the batch dimension of 1 when the model batches,
// and each request of a sample the same data. What a client request
// could not carry (a missing or unknown input, variable dims, data that
// does not fit, a file that cannot be read) fails here, before any
// instance exists, so a bad sample fails the load with what is wrong.
func warmupSamples(cfg *inference.ModelConfig, dir string) ([]warmupSample, error) {
	var out []warmupSample
	files := os.DirFS(filepath.Join(dir, warmupFolder))
	for _, ws := range cfg.GetModelWarmup() {
		if ws.GetBatchSize() == 0 {
			continue // Triton skips a sample of batch 0
		}
		s, err := warmupSampleOf(cfg, ws, files, filepath.Join(dir, warmupFolder))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// warmupSampleOf makes one sample; files is the model's warmup folder,
// found at folder (for messages).
func warmupSampleOf(cfg *inference.ModelConfig, ws *inference.ModelWarmup, files fs.FS, folder string) (warmupSample, error) {
	s := warmupSample{name: ws.GetName(), count: max(1, int(ws.GetCount())), batch: int(ws.GetBatchSize()),
		req: &inference.ModelInferRequest{ModelName: cfg.GetName()}}
	batching := cfg.GetMaxBatchSize() > 0
	// Sorted, so that the inputs reach the backend in one order on every
	// executor (a map's order varies).
	names := make([]string, 0, len(ws.GetInputs()))
	for name := range ws.GetInputs() {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		in := ws.GetInputs()[name]
		dims := in.GetDims()
		if slices.ContainsFunc(dims, func(d int64) bool { return d < 0 }) {
			return s, tritonerr.InvalidArgf("warmup setting expects all variable-size dimensions are specified for input '%s'", name)
		}
		dt := tensor.FromConfig(in.GetDataType())
		if dt == tensor.Invalid {
			return s, tritonerr.InvalidArgf("warmup sample '%s' of model '%s': input '%s' has no valid data_type", s.name, cfg.GetName(), name)
		}
		elems, err := tensor.ElementCount(name, dims)
		if err != nil {
			return s, err
		}
		size := elems * int64(dt.Size())
		if dt == tensor.Bytes {
			size = elems * 4 // zeros: elements of length 0, a 4-byte length each
		}
		var data []byte
		switch src := in.GetInputDataType().(type) {
		case *inference.ModelWarmup_Input_ZeroData:
			data = make([]byte, size)
		case *inference.ModelWarmup_Input_RandomData:
			data = make([]byte, size)
			if dt != tensor.Bytes {
				for i := range data {
					data[i] = byte(rand.Uint32())
				}
			}
		case *inference.ModelWarmup_Input_InputDataFile:
			if data, err = readWarmupFile(files, folder, src.InputDataFile, name); err != nil {
				return s, err
			}
			if dt != tensor.Bytes {
				if int64(len(data)) < size {
					return s, tritonerr.InvalidArgf("warmup setting expects %d bytes, but the data provided from %sonly has %d bytes", size, src.InputDataFile, len(data))
				}
				data = data[:size]
			}
		default:
			return s, tritonerr.InvalidArgf("warmup setting expects input '%s' to have input_data_type set", name)
		}
		original := slices.ContainsFunc(cfg.GetInput(), func(mi *inference.ModelInput) bool { return mi.GetName() == name })
		// The batch dimension of 1 where the model batches, also on a
		// control input (Triton's override input of batch size 1), but
		// not on a shape tensor, which a client sends without it.
		shape := dims
		if batching && !(original && isShapeTensor(cfg, name)) {
			shape = append([]int64{1}, dims...)
		}
		if original {
			s.req.Inputs = append(s.req.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: name, Datatype: dt.String(), Shape: shape})
			s.req.RawInputContents = append(s.req.RawInputContents, data)
			continue
		}
		if !isControlOrState(cfg, name) {
			return s, tritonerr.InvalidArgf("warmup sample '%s' of model '%s' has input '%s', which is neither an input of the model nor one of its sequence control or state inputs", s.name, cfg.GetName(), name)
		}
		s.extra = append(s.extra, backend.Input{Name: name, DataType: dt, Shape: shape, Data: data})
	}
	// What a client's request would be refused for (a required input
	// missing, a datatype or shape the model does not take, BYTES data that
	// does not frame) refuses the sample, in the same words.
	if err := infer.Normalize(cfg, s.req, backend.NewRequest(context.Background(), nil)); err != nil {
		return s, err
	}
	return s, nil
}

// readWarmupFile reads an input_data_file from the model's warmup folder.
// A name that leaves the folder is refused: the file must be part of the
// model (a model loaded with its files over the API cannot read the
// executor's).
func readWarmupFile(files fs.FS, folder, name, input string) ([]byte, error) {
	if !fs.ValidPath(name) || name == "." {
		return nil, tritonerr.InvalidArgf("warmup setting of input '%s' names input_data_file '%s', which is not a file in the model's '%s' folder", input, name, warmupFolder)
	}
	data, err := fs.ReadFile(files, name)
	if err != nil {
		why := err.Error()
		var pe *fs.PathError
		switch {
		case errors.Is(err, fs.ErrNotExist):
			why = "No such file or directory" // strerror(ENOENT), as Triton reports it
		case errors.As(err, &pe):
			why = pe.Err.Error()
		}
		return nil, tritonerr.Internalf("failed to open text file for read %s: %s", path.Join(filepath.ToSlash(folder), name), why)
	}
	return data, nil
}

// isShapeTensor reports whether name is a shape-tensor input of cfg
// (never given a batch dimension).
func isShapeTensor(cfg *inference.ModelConfig, name string) bool {
	for _, mi := range cfg.GetInput() {
		if mi.GetName() == name {
			return mi.GetIsShapeTensor()
		}
	}
	return false
}

// isControlOrState reports whether name is one of the sequence batcher's
// control inputs or implicit-state inputs.
func isControlOrState(cfg *inference.ModelConfig, name string) bool {
	sb := cfg.GetSequenceBatching()
	for _, c := range sb.GetControlInput() {
		if c.GetName() == name {
			return true
		}
	}
	for _, st := range sb.GetState() {
		if st.GetInputName() == name {
			return true
		}
	}
	return false
}

// warmUp runs the samples on every instance, in order, each count times,
// as Triton does for every instance it creates. The first sample that
// fails ends the warmup with Triton's error, which fails the load.
func (mv *modelVersion) warmUp(ctx context.Context, samples []warmupSample) error {
	for _, in := range mv.instances {
		for i := range samples {
			s := &samples[i]
			for iteration := 1; iteration <= s.count; iteration++ {
				// Triton's wording: its QA looks for it in the log.
				mv.e.log.Debug(fmt.Sprintf("model '%s' instance %s is running warmup sample '%s' for iteration %d", mv.name, in.info.Name, s.name, iteration),
					"model", mv.name, "version", mv.vstr)
				if err := in.warmUp(ctx, s); err != nil {
					mv.e.log.Debug(fmt.Sprintf("model '%s' instance %s failed to run warmup sample '%s'", mv.name, in.info.Name, s.name),
						"model", mv.name, "version", mv.vstr, "err", err)
					return err
				}
			}
		}
	}
	return nil
}

// warmUp runs one execution of sample s on the instance: s.batch
// requests, each normalized as a client's, with the sample's other inputs
// (and initial implicit states where the model has them) added as a
// sequence's control tensors are. It returns once every request has its
// final response (a decoupled backend may send after Execute returns),
// with Triton's error, naming every response error, if any failed.
func (in *instance) warmUp(ctx context.Context, s *warmupSample) error {
	mv := in.mv
	now := time.Now()
	batch := make([]*pending, s.batch)
	reqs := make([]*backend.Request, s.batch)
	var (
		mu     sync.Mutex
		failed []string
	)
	decoupled := mv.decoupled()
	var left atomic.Int64 // decoupled requests without their final response
	left.Store(int64(s.batch))
	finals := make(chan struct{})
	for i := range batch {
		p := &pending{received: now, queued: now}
		r := backend.InitRequest(new(backend.Request), ctx, p)
		if err := infer.Normalize(mv.cfg, s.req, r); err != nil {
			return err
		}
		r.Inputs = append(r.Inputs, s.extra...)
		if mv.states != nil {
			r.Inputs = append(r.Inputs, missingInputs(r.Inputs, mv.states.Inputs(mv.states.Start()))...)
		}
		r.Decoupled = decoupled
		if decoupled {
			p.onResponse = func(resp *backend.Response) {
				if resp.Err != nil {
					mu.Lock()
					failed = append(failed, resp.Err.Msg)
					mu.Unlock()
				}
				if resp.Final && left.Add(-1) == 0 {
					close(finals)
				}
			}
		}
		p.req, p.size = r, max(1, r.BatchSize)
		batch[i], reqs[i] = p, r
	}
	in.execute(ctx, reqs, batch, false)
	if decoupled {
		select {
		case <-finals:
		case <-ctx.Done():
			return tritonerr.Unavailablef("warmup of model '%s' was interrupted: %v", mv.name, ctx.Err())
		}
	} else {
		for _, p := range batch {
			if err := p.failure(); err != nil {
				failed = append(failed, tritonerr.From(err).Msg)
			}
		}
	}
	if len(failed) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "failed to run warmup sample '%s': ", s.name)
	for _, f := range failed {
		b.WriteString(f)
		b.WriteString("; ")
	}
	return tritonerr.InvalidArgf("%s", b.String())
}

// missingInputs returns the inputs of add that have no namesake in have.
func missingInputs(have, add []backend.Input) []backend.Input {
	var out []backend.Input
	for _, a := range add {
		if !slices.ContainsFunc(have, func(h backend.Input) bool { return h.Name == a.Name }) {
			out = append(out, a)
		}
	}
	return out
}
