package executor

import (
	"bytes"
	"path"
	"slices"
	"strings"

	"github.com/nereid-io/nereid/api/inference"
	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// AllowUploadedCodeFlag is the flag of the executor (and of the standalone
// server) that sets Config.AllowUploadedCode.
const AllowUploadedCodeFlag = "--allow-uploaded-code"

// elfMagic starts every ELF file: shared libraries and executables.
var elfMagic = []byte("\x7fELF")

// uploadedCode says why a file of a load request is code that a backend
// would load or run, or "" when it is not: a shared library (by its name,
// libX.so or libX.so.1, or an ELF file by its contents), Python source or
// bytecode, or the file the Python backend runs for cfg
// (default_model_filename).
func uploadedCode(p string, data []byte, cfg *inference.ModelConfig) string {
	base := path.Base(p)
	switch {
	case strings.HasSuffix(base, ".so") || strings.Contains(base, ".so."):
		return "a shared library"
	case bytes.HasPrefix(data, elfMagic):
		return "an ELF binary"
	case strings.HasSuffix(base, ".py") || strings.HasSuffix(base, ".pyc"):
		return "Python code"
	case cfg.GetBackend() == "python" && cfg.GetDefaultModelFilename() != "" && base == cfg.GetDefaultModelFilename():
		return "the file the Python backend runs"
	}
	return ""
}

// executionEnvParam is the Python backend's parameter naming the packed
// environment (its interpreter and libraries) that runs the model.
const executionEnvParam = "EXECUTION_ENV_PATH"

// refuseUploadedCode refuses a load whose files carry code that a backend
// would load or run, when the executor does not allow code that arrives in
// a request: a backend library uploaded as "file:1/libtriton_X.so" would be
// opened into the executor's process, a "file:1/model.py" run by the
// Python backend. A shared library that the model's backend would not open
// is refused too: it is code arriving in a request all the same, and a
// backend or a Python model may open it later. So is a configuration whose
// Python execution environment lies among the uploaded files.
func refuseUploadedCode(name string, files map[string][]byte, cfg *inference.ModelConfig) error {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		if what := uploadedCode(p, files[p], cfg); what != "" {
			return tritonerr.InvalidArgf("failed to load '%s', file 'file:%s' of the load request is %s: code that arrives in a load request is not loaded or run unless the server is started with %s=true (backend libraries come from the backend directory)",
				name, p, what, AllowUploadedCodeFlag)
		}
	}
	if env := cfg.GetParameters()[executionEnvParam].GetStringValue(); strings.Contains(env, "$$TRITON_MODEL_DIRECTORY") {
		return tritonerr.InvalidArgf("failed to load '%s', parameter '%s' names an execution environment among the files of the load request: code that arrives in a load request is not loaded or run unless the server is started with %s=true",
			name, executionEnvParam, AllowUploadedCodeFlag)
	}
	return nil
}

// uploaded reports whether dir is the directory of a model whose files
// arrived in the load request being served, while code that arrives in
// requests is not allowed: its backend library is taken from the backend
// directory only.
func (e *Executor) uploaded(dir string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.uploads[dir]
}

// setUploaded marks (or unmarks) dir as the directory of a model whose
// files arrived in a load request.
func (e *Executor) setUploaded(dir string, on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !on {
		delete(e.uploads, dir)
		return
	}
	if e.uploads == nil {
		e.uploads = map[string]bool{}
	}
	e.uploads[dir] = true
}
