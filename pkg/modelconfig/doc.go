// Package modelconfig reads a model's config.pbtxt into Triton's ModelConfig
// message and gives it Triton's defaults, validation and JSON form.
//
// Load is what a server calls for a model directory: it parses the file as
// protobuf text, fills the fields Triton fills (name from the directory,
// backend from the platform or the model files, version_policy, instance
// groups, dynamic- and sequence-batching defaults, pinned-memory flags) and
// validates the result with Triton's rules and error messages, so a user who
// moves a model repository from Triton sees the same errors. Parse, Normalize
// and Validate are the steps on their own, for configs that do not come from
// a directory.
//
// JSON renders a config the way Triton's GET /v2/models/NAME/config does:
// proto field names, enums by name, fields without presence printed even at
// their default values, and 64-bit integers as JSON numbers rather than the
// strings protojson would give.
//
// Errors are *tritonerr.Error values; parse errors name the file, the line
// and the field, validation errors use Triton's wording and name the model.
//
// What Nereid does not do here, because it has no way to: GPU discovery
// (KIND_AUTO resolves to KIND_CPU and KIND_GPU groups are kept as written for
// the executor to check) and backend auto-completion of inputs and outputs
// from model files.
package modelconfig
