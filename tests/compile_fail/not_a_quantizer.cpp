// Must not compile: an int is not a Quantizer.
import kvlab;
using namespace kvlab::parts;
const kvlab::any_recipe r = kvlab::recipe{.keys = kvlab::stream{8, token{}}};
int main() {}
