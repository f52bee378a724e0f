// Must not compile: a granularity spanning the whole tensor cannot stream through a cache.
import kvlab;
using namespace kvlab::parts;
const kvlab::any_recipe r = kvlab::recipe{.keys = kvlab::stream{int_q{8}, tensor{}}};
int main() {}
