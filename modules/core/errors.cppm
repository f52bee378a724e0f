// The one exception type kvlab throws for bad input: its message names what is wrong
// (which part, expected vs found) so the command line can print it and exit non-zero.
module;
#include <stdexcept>
#include <string>
export module kvlab.core:errors;

export namespace kvlab {

class error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

} // namespace kvlab
