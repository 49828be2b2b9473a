// Whether a JSONL record is one valid JSON text, as nlohmann::json::accept decides, at
// memory speed for the records datasets hold (docs/ARCHITECTURE.md "Datasets").
//
// A fast checker walks the grammar once without building anything: strings are scanned 16
// bytes at a time (SSE2) for a quote, a backslash, a control byte or a non-ASCII byte, and
// UTF-8 is checked by the table of RFC 3629. It accepts only texts it is sure of; anything
// it does not accept (an error, or a case it leaves alone: \u escapes of surrogates, D800 to
// DFFF, whose pairing nlohmann checks; exponents, numbers of 300 characters or more, nesting
// deeper than 64, a byte order mark) goes to nlohmann::json::accept, which decides. So the
// set of accepted records is nlohmann's.
#pragma once

#include <string_view>

namespace ptcfs {

// True when `text` is one JSON value, optionally surrounded by whitespace.
bool json_valid(std::string_view text);

// The fast checker alone: true only for valid JSON; false for invalid JSON and for the
// cases it leaves to nlohmann (tests compare the two).
bool json_valid_fast(std::string_view text);

}  // namespace ptcfs
