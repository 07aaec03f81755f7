#!/system/bin/sh
# wrap.sh template: runs an NDK app under malloc debug (Android 8.1, API 27, and later).
#
# Ship a copy for every ABI the app has native code for. With Android Studio / Gradle:
#   app/src/main/resources/lib/<ABI>/wrap.sh        (<ABI>: arm64-v8a, armeabi-v7a, x86_64, x86)
# The system runs wrap.sh only for a debuggable build, from the extracted native library
# directory: build the debug variant and set `packaging { jniLibs { useLegacyPackaging = true } }`
# (android:extractNativeLibs="true").
#
# The app is started as `wrap.sh <command that starts the app...>`; this sets the options and
# runs that command under logwrapper (stdout/stderr to logcat). malloc debug logs to logcat with
# the tag malloc_debug. A heap dump of the running app (needs a backtrace option):
#   malloc-debug device dump PID --app --out heap.txt   (= adb shell am dumpheap -n PID FILE)
#   malloc-debug report heap.txt --html heap.html

# malloc debug options (space separated; see the options in the README).
OPTIONS="backtrace leak_track"

# Options can be changed without rebuilding the APK (where the app may read debug.* properties):
#   adb shell setprop debug.malloc_debug.options "'backtrace=32 guard'"
# (restart the app afterwards; an empty value restores OPTIONS).
override=$(getprop debug.malloc_debug.options 2>/dev/null)
if [ -n "$override" ]; then
  OPTIONS=$override
fi

export LIBC_DEBUG_MALLOC_OPTIONS="$OPTIONS"
exec logwrapper "$@"
