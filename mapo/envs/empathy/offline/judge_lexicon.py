"""What the offline judge looks for: phrase patterns, word lists and exemplar sentences.

Pure data (compiled regular expressions, word sets, sentence banks), written for this
project; `judge.py` turns matches and similarities into levels. Each pattern family
matches whole words, case-insensitively.
"""

from __future__ import annotations

import re

from mapo.text import stem


def _patterns(*phrases: str) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(phrases) + r")\b", re.IGNORECASE)


# Templated / performative empathy: support formulas that fit any story.
TEMPLATE = _patterns(
    r"i (?:completely |totally |really )?(?:understand|know) (?:exactly )?how you(?:'re)? feel(?:ing)?",
    r"i feel you",
    r"(?:that|this|it) must (?:be|have been) (?:so |really |very |incredibly )?(?:hard|tough|difficult|rough)",
    r"(?:that|this|it) sounds (?:so |really |very )?(?:hard|tough|rough|difficult)",
    r"i'?m (?:so |really |very )?sorry (?:to hear|you're going through|you are going through|for your loss)",
    r"sending (?:you )?(?:so much |lots of |a big )?(?:hugs?|love|strength|positive vibes|light)",
    r"(?:your|all (?:of )?your|these) feelings(?: of [a-z ,]{3,60}?)? (?:are|is) (?:all )?(?:completely |totally |so )?valid",
    r"valid (?:emotions|feelings)",
    r"your (?:pain|sadness|anger|journey) is valid",
    r"i'?m (?:always )?here for you",
    r"(?:remember to |please )?take care of yourself",
    r"don'?t worry(?: so much| too much| about it)?",
    r"you'?ll do (?:amazing|great|fine|brilliant)",
    r"you'?re not alone",
    r"stay (?:strong|positive|hopeful|optimistic)",
    r"better days (?:are|lie) (?:coming|ahead)",
    r"keep (?:fighting|going|pushing|smiling|your chin up)",
    r"(?:the|every) good fight",
    r"hang in there",
    r"(?:everything|it|things) will get better",
    r"believe in yourself",
    r"you can do (?:it|anything)",
    r"keep your head up",
    r"(?:hope|i'm sure) (?:you feel better|things get better|it all works out|you'?ll be fine)",
    r"don'?t be so hard on yourself",
    r"tomorrow is a new day",
    r"every little bit helps",
    r"keep it up",
    r"you are (?:seen|heard|enough)",
    r"love and light",
    r"follow your (?:heart|gut|passion|dreams?)",
    r"just be yourself",
    r"it'?s never too late",
    r"life is short",
    r"go for it",
)
# Platitudes: a saying about life in place of understanding this life.
PLATITUDE = _patterns(
    r"everything happens for a reason",
    r"time heals",
    r"(?:in )?a better place",
    r"communication is (?:the )?key",
    r"(?:grief|life|healing) is a journey",
    r"it is what it is",
    r"that'?s (?:just )?life",
    r"(?:getting older|ageing|aging|change) is (?:always )?hard",
    r"look on the bright side",
    r"everyone (?:goes through|feels|knows)",
    r"(?:women|men|kids|teenagers|old people) always",
)
# The reply talking about itself as a machine or about the text it is writing ("as an AI, I
# don't have access to ...", "This sentence is a delicate balance ..."): nothing said to them.
META = _patterns(
    r"as an? (?:[\w-]+ )?(?:ai|chatbot|language model|virtual assistant)",
    r"i'?m (?:just )?an? (?:ai|chatbot|language model|virtual assistant)",
    r"i (?:don'?t|do not) have (?:the )?(?:capability|ability) to",
    r"i (?:can'?t|cannot) (?:access|browse|see) (?:your|the internet|personal)",
    r"this (?:sentence|version|rewrite|draft|paragraph) (?:is|uses|reads|works|captures)",
    r"^(?:premise|alternative|revised version|rewritten)(?=\s*:)",
)
# False reassurance and cheerleading: promising an outcome or someone else's mind that no one
# can know ("I'm sure it'll work out", "before you know it"); performed comfort, however grounded.
REASSURANCE = _patterns(
    r"i'?m (?:so |absolutely )?(?:sure|certain|confident) (?:that )?(?:[\w']+ ){0,3}?(?:will|'ll|means? well|only|just|did better|doing)",
    r"before you know it",
    r"(?:don'?t|do not|try not to|never) let (?:[\w'-]+ ){1,4}?(?:get to you|get you down|bother you|upset you|ruin|spoil)",
    r"(?<!when )(?<!if )(?<!whether )you'?ll (?:likely |probably |soon |definitely |totally |all )?(?:be (?:back|laughing|fine|okay|ok|great|amazing)|land on your feet|get there|bounce back|thank yourself)",
    r"(?:it|this|that)(?:'ll| will) (?:probably |soon |eventually |all )?(?:pass|blow over|feel (?:natural|normal|easier))",
    r"(?:they|he|she)(?:'ll| will) (?:soon |eventually )?come (?:a)?round",
    r"you'?ll feel (?:better|fine)",
    r"(?:everything|it|things)(?:'ll| will) (?:all )?(?:work out|fall into place|be (?:fine|okay|ok|alright))",
    r"(?:you'?re|you are) doing (?:great|amazing|so well|brilliantly)",
    r"you(?:'ve)? (?:totally )?got this",
)
# Minimising the problem (C_neg -2 when it calls it trivial, else -1).
TRIVIALISING = _patterns(
    r"not (?:that |a |such a )?(?:big|huge) deal",
    r"not that deep",
    r"(?:it'?s|that'?s|it was|is|was|are|were) (?:only|just|merely) (?:stuff|things|a|an|one|some|the)\b(?! (?:start|beginning|first))",
    r"(?:can|could) (?:always |just )?(?:get|buy|adopt|find) (?:another|a new|a different|a puppy|a kitten)",
    r"could (?:be|have been) (?:a lot |much )?worse",
    r"at least (?:it|you|they|he|she|now)",
    r"all in your head",
    r"(?:so |being )?(?:petty|childish|silly|trivial)",
    r"bigger deal than",
    r"(?:making|make) (?:too much|a mountain|a big deal|a fuss)",
    r"we all get old",
    r"(?:look at|think of|see) it as (?:an? )?(?:early|free|nice|welcome|good|great|blessing|opportunity|holiday|break|vacation)",
)
MINIMISING = _patterns(
    r"at least",
    r"happens? (?:to (?:everyone|everybody|all of us)|all the time)",
    r"every(?:one|body) (?:gets|has|goes|does|feels|deals|makes mistakes|messes up|slips up)",
    r"(?:a lot of|lots of|plenty of|many|most) (?:people|folks|of us) (?:feel|get|have|go through|deal|struggle|are)\b",
    r"(?:stressful|hard|tough|difficult|normal|common|scary|awkward) for (?:everyone|everybody|all of us)",
    r"nothing personal",
    r"(?:it'?s|that'?s) (?:completely |totally )?normal\b(?! to feel| that you)",
    r"that'?s (?:just )?how (?:it goes|it is|things are|\w+ are|it works|things work|\w+ works)",
    r"(?:pretty|very|quite|really|super|so|extremely|incredibly) normal\b(?! to feel)",
    r"let (?:it|this|that)(?: one)? slide",
    r"(?:just |simply )?not (?:the right time|meant to be)",
    r"that'?s (?:just )?(?:business|high school|life|the way)",
    r"(?:don'?t|try not to) take it personally",
    r"(?:friends|people|bands|couples) (?:come and go|drift apart|break up all the time)",
    r"you'?ll (?:get over it|forget)",
    r"(?:will|they'?ll) (?:forget|have forgotten) (?:about )?it",
    r"let it go",
    r"move on",
    r"(?:start|starting|keep|try|begin|think about) moving on",
    r"keeping score",
    r"(?:some|most) people just",
    r"ignore (?:her|him|them|it)",
    r"can do what they want",
    r"don'?t owe anyone",
    r"(?:could|can) (?:always|just) (?:try again|play online|find)",
    r"doesn'?t (?:really )?matter",
    r"(?:i )?(?:wouldn'?t|don'?t|shouldn'?t|no need to) (?:read too much|make a (?:fuss|big deal|scene)|dwell|overthink|worry too much)",
    r"(?:isn'?t|is not|wasn'?t) (?:that|so|such a|very) (?:long|bad|big|serious|important|much|hard)",
    r"(?:he'?s|she'?s|they'?re|it'?s|you'?re) (?:probably |maybe )?(?:just|only) (?:busy|tired|stressed|age|ageing|getting older|a phase|hormones|family|being)",
    r"(?:others|other people|lots of people|many people|some people) (?:have it|would (?:love|kill|be happy|give))",
    r"(?:it'?s|this is) (?:her|his|their) (?:\w+ )?(?:life|wedding|choice|decision|call), not yours",
    r"see it from (?:her|his|their) (?:side|point of view|perspective)",
    r"(?:young people|parents|kids|teenagers) (?:always|do things differently|say)",
    r"for the best",
    # telling them not to feel it: "no need to take it personally", "try not to worry"
    r"no need to (?:take|worry|panic|stress|dwell|overthink|fret|get (?:upset|worked up)|read|lose sleep|think about)",
    r"try not to (?:worry|think|dwell|overthink|stress|panic|fret|take|read|get)",
    r"read (?:too|so) much into",
    r"overthink\w*",
    r"(?:wouldn'?t|don'?t) waste (?:your |any )?(?:energy|time|breath)",
    # guessing others' minds to shrink it: "she is only tired", "nobody is thinking about it"
    r"(?:he|she|they|it) (?:is|are|was) (?:probably |maybe )?(?:just|only) (?:busy|tired|stressed|teasing|joking|a phase)",
    r"(?:is|'s) probably nothing",
    r"probably (?:doesn'?t|don'?t|didn'?t) (?:care|mind|notice|mean)",
    r"(?:nobody|no one)(?: [\w']+){0,3} (?:is|'s|will|'ll) (?:even )?(?:thinking|remember|care|notice|talking)",
    # the silver lining: the loss recast as a gift before it is heard
    r"(?:a|an) (?:chance|opportunity) to (?:grow|learn|start (?:over|fresh|again)|reinvent|prove)",
    r"(?:could|might|may) (?:actually |even |really )?be (?:exciting|a good thing|good for you|a blessing|fun|freeing|an adventure)",
    r"(?:a bit of |an )?adventure for",
    r"blessing in disguise",
    r"(?:is|are) (?:actually |really )?a gift",
    r"silver lining",
)
# Invalidating the feelings themselves.
INVALIDATING = _patterns(
    r"overreact\w*",
    r"get over it",
    r"(?<!n't )(?<!not )(?<!you )stop (?:feeling sorry|moping|worrying|stressing|complaining|overthinking|being|crying|catastrophi[sz]ing)",
    r"toughen up",
    r"(?:don'?t|do not) be (?:so |too )?(?:sad|upset|sensitive|dramatic|emotional|negative)\b",
    r"(?:you'?re|you are|you get|you'?re being|being) (?:so |too |a bit |a little )?(?:sensitive|dramatic|emotional)",
    r"(?:it'?s|it might be|it may be|it'?s probably|high) time (?:to|you) (?:start |began |begin )?(?:mov\w+ on|let\w* (?:it )?go|get\w* over)",
    r"(?:there'?s |there is )?(?:no|nothing) (?:reason|need|point) (?:to|in) (?:cry|crying|worry|worrying|be|feel|feeling|lose|get|panic|stress|being)",
    r"nothing to (?:worry|lose sleep|be upset|cry|stress|be sad|be ashamed) (?:about|over)",
    r"you shouldn'?t (?:feel|be|cry)",
    r"you should (?:be|feel) (?:grateful|happy|glad|thankful|proud)",
    r"you'?re right that you shouldn'?t",
    r"unprofessional",
    r"(?:is|'s|are|'re) right in a way",
    r"(?:has|have) a point",
    r"maybe you are",
    r"(?:you can|can) always try again",
    r"just relax",
    r"calm down",
    r"you knew this would happen",
    r"you'?re making it",
    # Hostile or fatalistic: their situation declared fixed, or the fault all theirs.
    r"you'?re not going anywhere",
    r"you'?re (?:just )?going to (?:stay|be stuck|remain) (?:here|there|like this|stuck|where you are)",
    r"(?:you'?ll|you will) never (?:change|get better|get past|get over|move on|be (?:okay|happy|enough))",
    r"nothing(?:'s| is| will)? (?:ever )?(?:going to )?(?:ever )?change\b",
    r"it(?: will|'s| is) never (?:going to )?change\b",
    r"there'?s no (?:hope|way out)\b",
    r"it'?s (?:just|all) you\b(?!r)",
)
# Pressure: telling them what to do.
PRESSURE = _patterns(
    r"you (?:really )?(?:need|have|got) to",
    r"you need (?:better|new|different|other|real) ",
    r"you'?ll (?:just )?have to",
    r"you must(?! (?:miss|feel|be|have))",
    r"you should(?!n't| have)",
    r"just (?:press|start|tell|find|get|do|stop|send|leave|quit|go|stick|ignore|buy|take|move|let|accept|focus|wait)",
    r"stop (?:making|wasting|doing|hiding|arguing)",
    r"(?:find|get) (?:new|better|another|other) (?:friends|gamers|ones|band|job|people)",
    r"cut (?:them|him|her) off",
    r"stay away from",
    r"(?:kick|throw) (?:him|her|them) out",
    r"you can'?t give up",
    r"be careful not to",
    r"think (?:very |really |long and )?(?:carefully|twice|hard)\b(?! about what you)",
    r"prove yourself",
    r"(?:it'?s|it is) (?:high )?time (?:to|you) stop",
    r"keep your head down",
)
# Moralising, blaming or undermining their agency.
MORALISING = _patterns(
    r"(?:your|his|her) own fault",
    r"what (?:you did|you'?ve done|you might have done) to (?:make|cause|deserve|provoke|push)",
    r"(?:you'?re|you are|you'?d be) (?:just )?as (?:guilty|bad|responsible|complicit)",
    r"(?:you have|it'?s your) (?:a )?(?:duty|obligation) to",
    r"than you(?:'d| would| will)? (?:admit|let on)",
    r"real (?:friends?|men|women|professionals|parents) (?:would|wouldn'?t|don'?t|do|never)",
    r"(?P<taut>[a-z]{4,}) (?:is|are) (?P=taut)",
    r"it'?s your fault",
    r"be grateful",
    r"be responsible",
    r"a real (?:professional|friend|man|woman|adult) would",
    r"never the answer",
    r"(?:that'?s|it'?s|is|are|would be) (?:just |a bit |pretty |really )?(?:selfish|outdated|pointless|wrong of you|irresponsible|cowardly|reckless|foolish|naive)",
    r"(?:at your age|at \d{2}),? you (?:might|may|will|won'?t|can'?t|shouldn'?t|probably)",
    r"too old (?:to|for)",
    r"non-negotiable",
    r"nobody likes",
    r"you should have",
    r"grow up",
    r"won'?t pay the bills",
    r"(?:making|no) excuses?",
    r"(?:a|you'?re a) danger",
    r"know best",
    r"(?:isn'?t|is not) for you",
    r"rarely work",
    r"(?:just )?stick with",
    r"once a \w+, always a",
    r"you deserve better",
    r"kills people",
    r"(?:your|the) doctor is right",
    r"(?:not|isn'?t) fair (?:to|on)",
    r"you'?re (?:enabling|being selfish|being naive|in denial)",
    r"(?:it'?s|is) for (?:his|her|their|your) own good",
    r"(?:are|is) counting on you",
    r"family (?:comes|always comes) first",
    r"(?:your (?:father|mother|dad|mum|mom|family|kids|children|parents|son|daughter)|they) (?:needs?|depends? on) you",
    r"(?:you'?re|you are) (?:an adult|a grown (?:man|woman|adult))",
    r"compromis\w* your principles",
    # love or conviction made a test they fail: "if you truly believe it, then ..."
    r"if you (?:really |truly |actually |genuinely )?(?:love|loved|care about|cared about|believe|believed|respect|respected)\b",
    r"actions have consequences",
    r"(?:partly |largely |entirely |all )?(?:your|his|her) own doing",
    r"(?:now you'?re|(?:can'?t|cannot|shouldn'?t) (?:really )?be) surprised",
    r"won'?t help your case",
)
IMPERATIVE_VERBS = frozenset(
    """try make ask talk join set schedule send update consider look change install check start stop write call go
    take keep find get tell use avoid focus remember reach book put plan record sign visit email text message practise
    practice list read listen see let give spend buy apply contact mute block unfollow delete turn switch download
    queue post share explain say meet invite drop skip quit leave move sell save cut limit remind treat reward
    celebrate forgive accept allow rest sleep eat walk breathe exercise journal note track log create build begin
    draft prepare pick choose decide research search watch hold stay ignore distract enroll enrol register sit
    speak open close clear bring organise organize arrange hire seek report document file request reply respond
    picture imagine try agree suggest propose offer export gather collect print compare phone ring bring
    ask""".split()
)
LEADING_WORDS = frozenset(
    "then and also maybe perhaps just first next time please so now instead afterwards finally tonight today tomorrow".split()
)
# "you could <verb>", "it might help to <verb>": a suggestion when <verb> is an action verb.
MODAL_SUGGESTION = re.compile(
    r"\b(?:you (?:could|might|can|may want to|might want to)|it (?:might|may|could) help to|why not)"
    r" (?:also |always |maybe |perhaps |just |try to |first )?([a-z]+)",
    re.IGNORECASE,
)
SUGGESTION = _patterns(
    r"you (?:could|might|can) (?:try|ask|tell|look|join|write|put|sit|start|record|talk|send|reach|set|call|take|use)",
    r"(?:it )?might (?:help|be worth)",
    r"could (?:help|give you|let you|connect you)",
    r"one option",
    r"worth (?:asking|trying|looking)",
    r"(?:maybe|perhaps) (?:try|record|write|ask|talk|you could)",
    r"(?:is|are) (?:also )?a good way",
    r"consider",
    r"look into",
    r"(?:one|a|the|your) (?:first |next |concrete |small |practical )?step (?:is|could be|would be|might be|may be)",
)
REFLECT = _patterns(
    r"^so\b",
    r"(?:it )?sounds like",
    r"you'?re saying",
    r"if i understand",
    r"what i(?:'m)? hear",
    r"it seems",
    r"since (?:he|she|they|you)",
)
REFRAME = _patterns(
    r"maybe (?:it|this|the|what|that)",
    r"rather than",
    r"not because",
    # (not "isn't only X" / "not just X, it's Y": that widens the picture, it does not reframe it)
    r"(?:isn'?t|is not|wasn'?t) (?:necessarily|a|about|even|lost|lying)",
    r"doesn'?t (?:mean|rewrite|stop|have to)",
    r"(?:may|might) (?:be|not|mean)",
    r"says more about",
    r"another way",
    r"instead of",
    r"not a (?:verdict|sign|reset|failure)",
    r"(?<!tell me )(?<!hear )(?<!know )(?<!learn )(?:less|more) (?:a|about|like)\b",  # not "tell me more about"
    r"more likely (?:to be )?(?:something|a|an|the|about|that)",
    r"sign of",
    r"often (?:means|shows|the|where)",
    r"a lot of (?:change|newness)",
)
# "You're not overreacting": denying a self-criticism is validation, never harm.
_NOT_SELF_CRITICISM = (
    (
        r"(?:you'?re|you are|it'?s|that'?s|this is|it is|you were|it was|that was)(?: really| just)? not"
        r" (?:a |an |being )?(?:overreacting|overthinking|silly|nothing|petty|dramatic|too much|stupid|crazy|weak|selfish"
        r"|annoying|ridiculous|a failure|your fault|a silly question)"
    ),
    r"(?:isn'?t|wasn'?t|is not|was not) (?:silly|petty|dramatic|stupid|ridiculous|nothing|your fault|selfish)",
)
NOT_SELF_CRITICISM = _patterns(*_NOT_SELF_CRITICISM)
VALIDATE = _patterns(
    *_NOT_SELF_CRITICISM,
    r"makes (?:complete |total )?sense",
    r"of course",
    r"no wonder",
    r"understandable",
    r"anyone would",
    r"would (?:[\w']+ ){1,3}anyone(?:'s)?\b",
    r"(?:a lot|a great deal|so much|too much) to (?:carry|hold|sit with|take in)",
    r"it'?s okay to",
    r"you must (?:miss|feel)",
    r"(?:that'?s|that is|it'?s) (?:painful|unfair|heartbreaking|humiliating|exhausting|frustrating)",
)
HEDGE = _patterns(
    r"maybe", r"perhaps", r"might", r"may", r"i wonder", r"i imagine", r"i guess", r"sounds like", r"it seems",
    r"seems to", r"could be", r"underneath", r"beneath", r"behind", r"as if", r"part of you",
)
RESONANCE = _patterns(
    r"underneath",
    r"deeper",
    r"maybe (?:there'?s|part of|what hurts|even|the fear)",
    r"i wonder if",
    r"part of this",
    r"as if",
    r"what hurts (?:most|the most)",
    r"(?:might|may) (?:bring|leave|stir|feel like)",
    r"(?:a|its own) (?:particular|quiet|strange|lonely|heavy)",
    r"(?:the|a) (?:fear|worry) that",
)
AFFIRM = _patterns(
    r"you'?ve (?:already|clearly|actually) \w+",
    r"you(?:'ve| have) (?:done|shown|managed|kept|built|planned|reshaped|run|made it|learned|noticed)",
    r"that (?:took|takes) (?:real )?(?:courage|guts|strength|effort|conviction)",
    r"takes (?:real )?(?:courage|conviction|effort|guts)",
    r"which (?:shows|says)",
    r"says (?:a lot|something) about",
    r"(?:your|real) (?:strength|courage|drive|conviction|integrity)",
    r"(?<!have )you noticed",
    r"(?:is|are) still yours",
)
EMPOWER = _patterns(
    r"you get to",
    r"your (?:choice|decision|call|terms|rule)",
    r"on your (?:own )?terms",
    r"(?:it'?s|is) (?:yours|your call)",
    r"yours to",
    r"you can (?:choose|decide)",
    r"(?:let|lets|and) you decide",
    r"you decide (?:what|how|whether|when|which)",
    r"(?:you'?re|you are) (?:allowed|entitled|free) to (?!feel|be (?:upset|angry|sad|hurt)|grieve|cry)",
    r"what(?:'s| is| would| do| does)? (?:one thing |the thing |part |kind of \w+ )?(?:you'?d|you would|you) (?:want|need|like|choose|wish|hope)",
    r"what (?:would|do) you want",
    r"what (?:matters|would feel|feels right)",
    r"which (?:one |option |of them )?(?:would|could) you",
    r"what (?:\w+ )?would you (?:choose|pick|try first)",
    r"what would (?:make|need to|have to|it look like|a|you)",
    r"(?:how|where|when) would you (?:like|want)",
    r"(?:you|and|to) decide (?:what|how|whether|when|which)",
    r"you (?:can|could|get to|are free to) choose",
    r"if you wrote the rule",
    r"who could (?:you|help)",
    r"what options do you see",
)
FEELINGS = frozenset(
    """hurt hurts hurting hurtful pain painful sad sadness sorrow grief grieving grieve mourning heartbreak
    heartbreaking heartbroken lonely loneliness alone isolated abandoned excluded ashamed shame guilt guilty regret
    afraid fear fears scared scary frightening frightened terrified dread anxious anxiety nervous worry worried
    worries uneasy angry anger furious resentment resentful bitter frustrating frustrated frustration irritated
    exhausting exhausted drained tired weary humiliating humiliated humiliation embarrassed embarrassment crushing
    crushed unfair stings sting stung discouraging discouraged disheartening demoralising demoralizing defeated
    stressful stress stressed overwhelmed overwhelming unsettling unsettled confusing confused confuse baffling
    disorienting disoriented envy envious jealous betrayed betrayal invisible unseen unheard dismissed unwanted
    rejected rejection insecure vulnerable panic panicked despair hopeless helpless trapped numb shaken shock
    shocked devastating devastated miss missing longing homesick upset reeling heavy torn empty loss
    distress distressing worthless disappointed disappointing disappointment""".split()
)
FEELING_STEMS = frozenset(stem(w) for w in FEELINGS)
# Feelings that usually lie under the stated anger or sadness (the rubric's A_prog 2: shame,
# grief, fear of being a burden); naming one they have not named is resonance, not validation.
DEEP_FEELINGS = frozenset(
    """ashamed shame humiliating humiliated humiliation grief grieving grieve mourning invisible unseen unheard
    unwanted rejected rejection betrayed betrayal abandoned worthless guilt guilty fear fears afraid dread
    lonely loneliness excluded burden""".split()
)

# Idioms that carry a feeling word without naming the feeling: "(it's) a shame" means "a pity", not the
# deep feeling shame above, which takes no article; read literally, the idiom would pay A_prog 2 for
# naming an unstated deep feeling (a trained policy collected it so: docs/judge.md).
SHAME_IDIOM = re.compile(r"\b(a|such a)\s+((?:real|great|big|terrible|crying)\s+)?shame\b", re.IGNORECASE)


def read_idioms(text: str) -> str:
    """`text` with each feeling idiom put as what it means ("it's a shame" -> "it's a pity")."""
    return SHAME_IDIOM.sub(lambda m: f"{m[1]} {m[2] or ''}pity", text)


# Topic-free examples of each move, for the semantic part of the judge.
AXIS_EXEMPLARS = {
    "C1": [
        "So if I understand you, this started after the change and you can't see why.",
        "So what happened is that they said one thing and then did another.",
        "Can you tell me more about when this started and what changed?",
        "It sounds like the part that confuses you most is why it happened now.",
    ],
    "C2": [
        "Maybe this isn't a sign that you failed, but a reaction to how much has changed at once.",
        "It might not be about you at all; it could say more about what they are going through.",
        "Another way to see it is that you were doing your best with what you knew then.",
        "What looks like the end of something may be the start of a different chapter.",
    ],
    "A1": [
        "It makes sense that you feel hurt after that.",
        "Of course you're upset; that was painful to go through.",
        "No wonder you feel exhausted after carrying this for so long.",
        "That sounds really lonely, and it's understandable that it weighs on you.",
    ],
    "A2": [
        "Underneath the anger there may be a fear that you don't matter to them.",
        "It sounds like what hurts most is feeling unseen by the people you care about.",
        "Maybe there's some shame mixed in, as if this says something about who you are.",
        "I wonder if part of you is grieving the future you had imagined.",
    ],
    "P1": [
        "You could ask them directly for one concrete example.",
        "One option is to talk to someone who knows the rules before you decide.",
        "That took real effort, and it shows how much you care.",
        "Maybe try writing down what you want to say first.",
    ],
    "P2": [
        "This is your decision, and you know what matters to you better than anyone.",
        "What would you want, if it were only up to you?",
        "You've already shown you can handle hard things; what would feel right for you next?",
        "You get to decide what success looks like here, on your own terms.",
    ],
}

# Support formulas that fit any story: a reply sentence this close to one of them is
# templated (the regex list above catches exact wordings, these catch paraphrases).
TEMPLATE_EXEMPLARS = [
    "I can only imagine how hard this must be for you.",
    "I'm so sorry you're going through this.",
    "That sounds really difficult.",
    "Your feelings are completely valid.",
    "I'm here for you no matter what.",
    "You're stronger than you think.",
    "Everything will work out in the end.",
    "Sending you lots of love and support.",
    "It's okay to not be okay.",
    "Be kind to yourself right now.",
    "Things will get better, I promise.",
    "You've got this, I believe in you!",
]

# Dismissive, invalidating and lecturing formulas, for paraphrases the patterns miss.
# Sentence similarity mostly tracks topic, so only a close match (HARM_SIM) counts.
HARM_EXEMPLARS = {
    "minimising": [
        "It's really not a big deal.",
        "That happens to everybody, it's nothing to get upset about.",
        "I wouldn't worry about it, it's nothing.",
        "It could have been much worse, so count yourself lucky.",
        "Honestly, it's just one of those things.",
        "You'll have forgotten about it in a week.",
        "Everyone goes through this, it's normal.",
        "Try not to dwell on it and just move forward.",
    ],
    "invalidating": [
        "You're being too sensitive about this.",
        "Don't be so dramatic.",
        "You shouldn't feel upset about that.",
        "There's no point crying over it.",
        "Stop being so emotional.",
        "You're overreacting.",
    ],
    "moralising": [
        "You should have known better.",
        "You need to take responsibility and do what's right.",
        "Be grateful for what you have.",
        "You only have yourself to blame.",
        "You have to stop making excuses.",
    ],
}


PATTERN_FAMILIES = {
    "template": TEMPLATE,
    "reassurance": REASSURANCE,
    "platitude": PLATITUDE,
    "meta": META,
    "trivialising": TRIVIALISING,
    "minimising": MINIMISING,
    "invalidating": INVALIDATING,
    "pressure": PRESSURE,
    "moralising": MORALISING,
    "reflect": REFLECT,
    "reframe": REFRAME,
    "validate": VALIDATE,
    "resonance": RESONANCE,
    "affirm": AFFIRM,
    "empower": EMPOWER,
}
CLAUSE_OPENERS = frozenset("so then just really and but now honestly seriously think also or".split())
REPORTED_SPEECH = frozenset("told asked expected pressured pushed urged supposed".split())
REPORTING_WORDS = frozenset(
    "means mean meant feel feels felt think thinks thought believe believes like that if because something nothing anything"
    " say says saying said".split()
)
HARM_FAMILIES = ("template", "reassurance", "platitude", "trivialising", "minimising", "invalidating", "pressure", "moralising")
# The listener giving its view of their story, not talking about itself.
ASSISTANT_VIEW = re.compile(
    r"\bi(?:'m| am)? (?:think|wonder|guess|imagine|suspect|notice|hear|sense|wondering)\b|\bmy (?:guess|sense|read)\b",
    re.IGNORECASE,
)
# Agreeing with their own dismissal ("you're right, it's only a race") makes it the reply's.
AGREEING = re.compile(r"\b(?:you'?re|you are) (?:right|correct)[,;:]?\s*$|\b(?:i agree|exactly|fair enough)[,;:]\s*$", re.IGNORECASE)
# A harm phrase inside a clause that weighs their options ("whether to keep going or let it go")
# reports their dilemma; it does not tell them anything.
WEIGHING = re.compile(r"\b(?:whether|wondering (?:if|whether)|deciding (?:if|whether))\b[^.;:!?]*$", re.IGNORECASE)
