// JSON Schema to a regular expression whose every match is a JSON text valid against the
// schema (the approach of Outlines): objects emit their properties in the schema's order
// (every listed property, so optional ones too), separators are ", " / ": " with an optional
// space, and numbers are bounded to 16 integer and fraction digits so the automaton stays
// finite. Supported: type (or a list of types), properties / required / additionalProperties
// (a schema), items / prefixItems / minItems / maxItems, enum, const, anyOf / oneOf,
// allOf of one schema, $ref into #/$defs or #/definitions (not recursive), string
// minLength / maxLength / pattern / format (date, time, date-time, uuid, email, ipv4),
// integer minimum / maximum / exclusive bounds, number bounds that are integers >= 0, and
// schemas without a type (any JSON value, nested at most two levels). Anything else is
// INVALID_ARGUMENT naming the keyword, never a silently weaker guide.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace inflight::guided {

StatusOr<std::string> JsonSchemaToRegex(std::string_view schema_json);

// The regular expression of the integers in [lo, hi] (decimal, no leading zeros).
std::string IntegerRangeRegex(int64_t lo, int64_t hi);

}  // namespace inflight::guided
