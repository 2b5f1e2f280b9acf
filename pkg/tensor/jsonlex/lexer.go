// Package jsonlex is a small, allocation-free JSON lexer for the KServe v2
// request path. It validates the full JSON grammar while handing out tokens
// as slices of the input, so tensor `data` can be decoded straight into a
// binary buffer and binary payloads can alias the request body.
//
// Errors read like Triton's (which uses rapidjson): "failed to parse the
// request JSON buffer: Invalid value. at 12". Nesting is capped (Triton
// rejects JSON deeper than 100 levels) so hostile input cannot exhaust the
// stack or the heap of whatever walks the tokens.
package jsonlex

import (
	"strconv"

	"github.com/nereid-io/nereid/pkg/tritonerr"
)

// DefaultMaxDepth is Triton's JSON nesting limit.
const DefaultMaxDepth = 100

// Kind is the kind of a token.
type Kind uint8

// Token kinds. A String token that names an object member has Key set.
const (
	EOF Kind = iota
	BeginObject
	EndObject
	BeginArray
	EndArray
	String
	Number
	True
	False
	Null
)

var kindNames = [...]string{
	EOF: "end of input", BeginObject: "object", EndObject: "'}'", BeginArray: "array",
	EndArray: "']'", String: "string", Number: "number", True: "boolean",
	False: "boolean", Null: "null",
}

// String names the kind the way error messages want it ("string", "array").
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "token"
}

// Token is one lexical token. Raw is the token's text in the input: for a
// String, the bytes between the quotes, still escaped (Escaped tells whether
// any backslash occurs); for a Number, its literal text.
type Token struct {
	Kind    Kind
	Key     bool // a String naming an object member
	Escaped bool
	Raw     []byte
	Offset  int // offset of the token in the whole document
}

// rapidjson's messages, which Triton passes through verbatim.
const (
	ErrDocumentEmpty     = "The document is empty."
	ErrRootNotSingular   = "The document root must not be followed by other values."
	ErrValueInvalid      = "Invalid value."
	ErrObjectMissName    = "Missing a name for object member."
	ErrObjectMissColon   = "Missing a colon after a name of object member."
	ErrObjectMissComma   = "Missing a comma or '}' after an object member."
	ErrArrayMissComma    = "Missing a comma or ']' after an array element."
	ErrStringUnicodeHex  = "Incorrect hex digit after \\u escape in string."
	ErrStringSurrogate   = "The surrogate pair in string is invalid."
	ErrStringEscape      = "Invalid escape character in string."
	ErrStringMissQuote   = "Missing a closing quotation mark in string."
	ErrStringInvalidEnc  = "Invalid encoding in string."
	ErrNumberTooBig      = "Number too big to be stored in double."
	ErrNumberMissFrac    = "Miss fraction part in number."
	ErrNumberMissExp     = "Miss exponent in number."
	parseErrorPrefix     = "failed to parse the request JSON buffer: "
	depthErrorMessageFmt = "JSON nesting depth exceeds maximum allowed limit (%d)"
)

// SyntaxError builds Triton's parse error for a message at a document offset.
func SyntaxError(msg string, offset int) *tritonerr.Error {
	return tritonerr.InvalidArgf("%s%s at %d", parseErrorPrefix, msg, offset)
}

// DepthError is Triton's error for JSON nested deeper than max.
func DepthError(max int) *tritonerr.Error {
	return tritonerr.InvalidArgf(depthErrorMessageFmt, max)
}

type state uint8

const (
	stValue           state = iota // a value must follow
	stFirstValueOrEnd              // just after '['
	stFirstKeyOrEnd                // just after '{'
	stKey                          // after ',' inside an object
	stCommaOrEnd                   // after a value inside a container
	stDone                         // the root value is complete
)

// Lexer walks one JSON document. The zero value is not usable; use New or
// NewAt.
type Lexer struct {
	buf      []byte
	pos      int
	base     int // offset of buf[0] in the whole document, for messages
	st       state
	stack    []byte // 'o' or 'a' per open container
	stackArr [32]byte
	depth0   int // containers already open around buf (for NewAt)
	// MaxDepth caps the nesting depth counted from the document root.
	MaxDepth int
}

// New returns a lexer over a whole document.
func New(buf []byte) *Lexer { return NewAt(buf, 0, 0) }

// NewAt returns a lexer over one value that sits at offset base of a larger
// document, nested inside depth open containers. Offsets in errors and the
// depth limit are then those of the whole document.
func NewAt(buf []byte, base, depth int) *Lexer {
	l := &Lexer{}
	l.Reset(buf, base, depth)
	return l
}

// Reset reuses the lexer for another buffer (see NewAt).
func (l *Lexer) Reset(buf []byte, base, depth int) {
	l.buf, l.pos, l.base, l.st, l.depth0 = buf, 0, base, stValue, depth
	l.stack = l.stackArr[:0]
	if l.MaxDepth == 0 {
		l.MaxDepth = DefaultMaxDepth
	}
}

// Offset is the current position in the whole document.
func (l *Lexer) Offset() int { return l.base + l.pos }

// Remaining is the input not yet read.
func (l *Lexer) Remaining() []byte { return l.buf[l.pos:] }

// Depth is the number of containers open, counted from the document root.
func (l *Lexer) Depth() int { return l.depth0 + len(l.stack) }

func (l *Lexer) errAt(msg string, pos int) error { return SyntaxError(msg, l.base+pos) }

func (l *Lexer) skipWS() {
	for l.pos < len(l.buf) {
		switch l.buf[l.pos] {
		case ' ', '\t', '\n', '\r':
			l.pos++
		default:
			return
		}
	}
}

func (l *Lexer) peek() byte {
	if l.pos < len(l.buf) {
		return l.buf[l.pos]
	}
	return 0
}

func (l *Lexer) afterValue() {
	if len(l.stack) == 0 {
		l.st = stDone
	} else {
		l.st = stCommaOrEnd
	}
}

func (l *Lexer) push(c byte) error {
	if l.depth0+len(l.stack)+1 > l.MaxDepth {
		return DepthError(l.MaxDepth)
	}
	l.stack = append(l.stack, c)
	return nil
}

func (l *Lexer) pop() {
	l.stack = l.stack[:len(l.stack)-1]
	l.afterValue()
}

// Next returns the next token; Kind EOF once the root value is complete and
// only whitespace follows.
func (l *Lexer) Next() (Token, error) {
	l.skipWS()
	switch l.st {
	case stDone:
		if l.pos < len(l.buf) {
			return Token{}, l.errAt(ErrRootNotSingular, l.pos)
		}
		return Token{Kind: EOF, Offset: l.Offset()}, nil
	case stCommaOrEnd:
		top := l.stack[len(l.stack)-1]
		c := l.peek()
		switch {
		case c == ',':
			l.pos++
			l.skipWS()
			if top == 'o' {
				return l.key()
			}
			return l.value()
		case c == ']' && top == 'a':
			l.pos++
			l.pop()
			return Token{Kind: EndArray, Offset: l.base + l.pos - 1}, nil
		case c == '}' && top == 'o':
			l.pos++
			l.pop()
			return Token{Kind: EndObject, Offset: l.base + l.pos - 1}, nil
		case top == 'a':
			return Token{}, l.errAt(ErrArrayMissComma, l.pos)
		default:
			return Token{}, l.errAt(ErrObjectMissComma, l.pos)
		}
	case stFirstKeyOrEnd:
		if l.peek() == '}' {
			l.pos++
			l.pop()
			return Token{Kind: EndObject, Offset: l.base + l.pos - 1}, nil
		}
		return l.key()
	case stKey:
		return l.key()
	case stFirstValueOrEnd:
		if l.peek() == ']' {
			l.pos++
			l.pop()
			return Token{Kind: EndArray, Offset: l.base + l.pos - 1}, nil
		}
		return l.value()
	default:
		if l.pos >= len(l.buf) && len(l.stack) == 0 && l.depth0 == 0 {
			return Token{}, l.errAt(ErrDocumentEmpty, l.pos)
		}
		return l.value()
	}
}

func (l *Lexer) key() (Token, error) {
	if l.peek() != '"' {
		return Token{}, l.errAt(ErrObjectMissName, l.pos)
	}
	t, err := l.str()
	if err != nil {
		return t, err
	}
	t.Key = true
	l.skipWS()
	if l.peek() != ':' {
		return Token{}, l.errAt(ErrObjectMissColon, l.pos)
	}
	l.pos++
	l.st = stValue
	return t, nil
}

func (l *Lexer) value() (Token, error) {
	start := l.pos
	switch c := l.peek(); c {
	case '{':
		if err := l.push('o'); err != nil {
			return Token{}, err
		}
		l.pos++
		l.st = stFirstKeyOrEnd
		return Token{Kind: BeginObject, Offset: l.base + start}, nil
	case '[':
		if err := l.push('a'); err != nil {
			return Token{}, err
		}
		l.pos++
		l.st = stFirstValueOrEnd
		return Token{Kind: BeginArray, Offset: l.base + start}, nil
	case '"':
		t, err := l.str()
		if err != nil {
			return t, err
		}
		l.afterValue()
		return t, nil
	case 't':
		return l.literal("true", True)
	case 'f':
		return l.literal("false", False)
	case 'n':
		return l.literal("null", Null)
	default:
		if c == '-' || (c >= '0' && c <= '9') {
			return l.number()
		}
		return Token{}, l.errAt(ErrValueInvalid, l.pos)
	}
}

func (l *Lexer) literal(word string, k Kind) (Token, error) {
	start := l.pos
	if len(l.buf)-l.pos < len(word) || string(l.buf[l.pos:l.pos+len(word)]) != word {
		return Token{}, l.errAt(ErrValueInvalid, l.pos)
	}
	l.pos += len(word)
	l.afterValue()
	return Token{Kind: k, Raw: l.buf[start:l.pos], Offset: l.base + start}, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number scans a JSON number token.
func (l *Lexer) number() (Token, error) {
	start := l.pos
	end, err := ScanNumber(l.buf, l.pos, l.base)
	if err != nil {
		return Token{}, err
	}
	l.pos = end
	l.afterValue()
	return Token{Kind: Number, Raw: l.buf[start:l.pos], Offset: l.base + start}, nil
}

// ScanNumber scans the JSON number that starts at buf[pos] as rapidjson
// does: a lone '-' or a missing digit after '.' or 'e' are errors; a leading
// zero ends the integer part. It returns the offset just past the number.
// base is the offset of buf in the document, for error messages.
func ScanNumber(buf []byte, pos, base int) (int, error) {
	if pos < len(buf) && buf[pos] == '-' {
		pos++
	}
	switch {
	case pos < len(buf) && buf[pos] == '0':
		pos++
	case pos < len(buf) && buf[pos] >= '1' && buf[pos] <= '9':
		for pos < len(buf) && isDigit(buf[pos]) {
			pos++
		}
	default:
		return 0, SyntaxError(ErrValueInvalid, base+pos)
	}
	if pos < len(buf) && buf[pos] == '.' {
		pos++
		if pos >= len(buf) || !isDigit(buf[pos]) {
			return 0, SyntaxError(ErrNumberMissFrac, base+pos)
		}
		for pos < len(buf) && isDigit(buf[pos]) {
			pos++
		}
	}
	if pos < len(buf) && (buf[pos] == 'e' || buf[pos] == 'E') {
		pos++
		if pos < len(buf) && (buf[pos] == '+' || buf[pos] == '-') {
			pos++
		}
		if pos >= len(buf) || !isDigit(buf[pos]) {
			return 0, SyntaxError(ErrNumberMissExp, base+pos)
		}
		for pos < len(buf) && isDigit(buf[pos]) {
			pos++
		}
	}
	return pos, nil
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// hex4 reads the 4 hex digits of a \u escape at buf[p:].
func hex4(buf []byte, p int) (rune, bool) {
	if p+4 > len(buf) {
		return 0, false
	}
	var r rune
	for i := 0; i < 4; i++ {
		v := hexVal(buf[p+i])
		if v < 0 {
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}

// str scans a string token starting at the opening quote.
func (l *Lexer) str() (Token, error) {
	start := l.pos
	end, escaped, err := ScanString(l.buf, l.pos, l.base)
	if err != nil {
		return Token{}, err
	}
	l.pos = end
	return Token{Kind: String, Escaped: escaped, Raw: l.buf[start+1 : end-1], Offset: l.base + start}, nil
}

// plainInString tells the bytes a string holds as they are: all but
// control characters, the quote and the backslash.
var plainInString = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// ScanString scans the JSON string whose opening quote is buf[pos] and
// returns the offset just past its closing quote and whether it contains
// escapes. It validates escapes (so AppendUnquoted cannot fail later) but
// not UTF-8, like rapidjson with Triton's default flags: BYTES elements
// keep their bytes. base is the offset of buf in the document.
func ScanString(buf []byte, pos, base int) (end int, escaped bool, err error) {
	start := pos
	pos++ // opening quote
	for {
		// Fast path: plain bytes, one table lookup each.
		for pos < len(buf) && plainInString[buf[pos]] {
			pos++
		}
		if pos >= len(buf) {
			return 0, false, SyntaxError(ErrStringMissQuote, base+start)
		}
		switch c := buf[pos]; {
		case c == '"':
			return pos + 1, escaped, nil
		case c == '\\':
			escaped = true
			escStart := pos
			pos++
			if pos >= len(buf) {
				return 0, false, SyntaxError(ErrStringMissQuote, base+start)
			}
			switch buf[pos] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				pos++
			case 'u':
				r, ok := hex4(buf, pos+1)
				if !ok {
					return 0, false, SyntaxError(ErrStringUnicodeHex, base+escStart)
				}
				pos += 5
				if r >= 0xD800 && r <= 0xDBFF {
					if pos+1 >= len(buf) || buf[pos] != '\\' || buf[pos+1] != 'u' {
						return 0, false, SyntaxError(ErrStringSurrogate, base+escStart)
					}
					r2, ok := hex4(buf, pos+2)
					if !ok {
						return 0, false, SyntaxError(ErrStringUnicodeHex, base+pos)
					}
					if r2 < 0xDC00 || r2 > 0xDFFF {
						return 0, false, SyntaxError(ErrStringSurrogate, base+escStart)
					}
					pos += 6
				} else if r >= 0xDC00 && r <= 0xDFFF {
					return 0, false, SyntaxError(ErrStringSurrogate, base+escStart)
				}
			default:
				return 0, false, SyntaxError(ErrStringEscape, base+escStart)
			}
		case c == 0:
			return 0, false, SyntaxError(ErrStringMissQuote, base+pos)
		default: // other control characters
			return 0, false, SyntaxError(ErrStringInvalidEnc, base+pos)
		}
	}
}

// SkipArrayFast skips the array whose '[' the lexer has just returned as t,
// matching brackets (and honouring strings) without checking the grammar in
// between, and returns the array's text. It is for values that are parsed
// again in full later (tensor data), so the work is not done twice; the
// depth limit still applies.
func (l *Lexer) SkipArrayFast(t Token) ([]byte, error) {
	start := t.Offset - l.base
	var arr [64]byte
	open := append(arr[:0], '[')
	buf := l.buf
	pos := start + 1
	for len(open) > 0 {
		for pos < len(buf) && buf[pos] != '[' && buf[pos] != ']' && buf[pos] != '"' && buf[pos] != '{' && buf[pos] != '}' {
			pos++
		}
		if pos >= len(buf) {
			break
		}
		switch c := buf[pos]; c {
		case '[', '{':
			open = append(open, c)
			if l.depth0+len(l.stack)-1+len(open) > l.MaxDepth {
				return nil, DepthError(l.MaxDepth)
			}
			pos++
		case ']', '}':
			if top := open[len(open)-1]; (top == '[') != (c == ']') {
				// A mismatched bracket: report it as the full parse would.
				if top == '[' {
					return nil, l.errAt(ErrArrayMissComma, pos)
				}
				return nil, l.errAt(ErrObjectMissComma, pos)
			}
			open = open[:len(open)-1]
			pos++
		default:
			end, _, err := ScanString(buf, pos, l.base)
			if err != nil {
				return nil, err
			}
			pos = end
		}
	}
	if len(open) > 0 {
		if open[len(open)-1] == '[' {
			return nil, l.errAt(ErrArrayMissComma, pos)
		}
		return nil, l.errAt(ErrObjectMissComma, pos)
	}
	l.pos = pos
	l.pop()
	return buf[start:pos], nil
}

// SkipValue skips the rest of the value that t began and returns the value's
// whole text. For a scalar token that is just its text (a string keeps its
// quotes); for BeginObject/BeginArray the lexer reads to the matching end.
func (l *Lexer) SkipValue(t Token) ([]byte, error) {
	start := t.Offset - l.base
	switch t.Kind {
	case BeginObject, BeginArray:
		want := len(l.stack) - 1
		for len(l.stack) > want {
			if _, err := l.Next(); err != nil {
				return nil, err
			}
		}
		return l.buf[start:l.pos], nil
	case String:
		return l.buf[start : start+len(t.Raw)+2], nil
	default:
		return t.Raw, nil
	}
}

// AppendUnquoted appends the unescaped bytes of a String token to dst.
func AppendUnquoted(dst []byte, t Token) []byte {
	if !t.Escaped {
		return append(dst, t.Raw...)
	}
	s := t.Raw
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			dst = append(dst, c)
			continue
		}
		i++
		switch s[i] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, _ := hex4(s, i+1)
			i += 4
			if r >= 0xD800 && r <= 0xDBFF && i+6 < len(s) {
				r2, _ := hex4(s, i+3)
				r = 0x10000 + (r-0xD800)<<10 + (r2 - 0xDC00)
				i += 6
			}
			dst = appendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, s[i])
		}
	}
	return dst
}

func appendRune(dst []byte, r rune) []byte {
	switch {
	case r < 0x80:
		return append(dst, byte(r))
	case r < 0x800:
		return append(dst, 0xC0|byte(r>>6), 0x80|byte(r)&0x3F)
	case r < 0x10000:
		return append(dst, 0xE0|byte(r>>12), 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
	default:
		return append(dst, 0xF0|byte(r>>18), 0x80|byte(r>>12)&0x3F, 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
	}
}

// UnquotedLen is the length of a String token once unescaped.
func UnquotedLen(t Token) int {
	if !t.Escaped {
		return len(t.Raw)
	}
	// Rare path: count by decoding into a small stack buffer chunk-wise
	// would be no faster than this simple walk.
	n := 0
	s := t.Raw
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			n++
			continue
		}
		i++
		if s[i] != 'u' {
			n++
			continue
		}
		r, _ := hex4(s, i+1)
		i += 4
		if r >= 0xD800 && r <= 0xDBFF && i+6 < len(s) {
			i += 6
			n += 4
			continue
		}
		switch {
		case r < 0x80:
			n++
		case r < 0x800:
			n += 2
		default:
			n += 3
		}
	}
	return n
}

// StringValue returns a String token's unescaped value as a Go string.
func StringValue(t Token) string {
	if !t.Escaped {
		return string(t.Raw)
	}
	return string(AppendUnquoted(make([]byte, 0, len(t.Raw)), t))
}

// Int64 parses a Number token as a signed integer; ok is false for
// fractions, exponents and values out of range.
func Int64(t Token) (int64, bool) {
	if t.Kind != Number || !isIntegerText(t.Raw) {
		return 0, false
	}
	return parseInt(t.Raw)
}

// Uint64 parses a Number token as an unsigned integer.
func Uint64(t Token) (uint64, bool) {
	if t.Kind != Number || !isIntegerText(t.Raw) || t.Raw[0] == '-' {
		if t.Kind == Number && string(t.Raw) == "-0" {
			return 0, true
		}
		return 0, false
	}
	return parseUint(t.Raw)
}

// parseUint parses decimal digits without the string conversion that
// strconv would need (this runs once per tensor element).
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (^uint64(0)-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	u, ok := parseUint(b)
	if !ok {
		return 0, false
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true
	}
	if u > 1<<63-1 {
		return 0, false
	}
	return int64(u), true
}

// Float64 parses a Number token; ok is false when it overflows a double
// (rapidjson's "Number too big to be stored in double.").
func Float64(t Token) (float64, bool) {
	if t.Kind != Number {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(t.Raw), 64)
	if err != nil {
		// Underflow rounds to zero quietly, as in rapidjson; overflow is an error.
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange && v == 0 {
			return 0, true
		}
		return 0, false
	}
	return v, true
}

// IsInteger tells whether a Number token is written without fraction or
// exponent (JSON integers, the only numbers accepted for integer tensors).
func IsInteger(t Token) bool { return t.Kind == Number && isIntegerText(t.Raw) }

func isIntegerText(b []byte) bool {
	for _, c := range b {
		if c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	return true
}
