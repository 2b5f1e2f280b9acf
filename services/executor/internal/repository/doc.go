// Package repository reads a Triton model repository from disk:
//
//	ROOT/
//	  MODEL/
//	    config.pbtxt
//	    1/ 2/ ...        numeric version directories
//
// Scan lists every model directory under the root with its configuration
// (loaded, normalized and validated by package modelconfig) and the versions
// its version_policy selects among the numeric version directories. A model
// that fails, whether in its configuration or because its policy selects no
// version, is still listed with Err set, so the repository index can report
// the reason while the other models serve.
package repository
